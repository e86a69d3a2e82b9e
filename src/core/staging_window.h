// Pipelined staging (docs/cuda.md): a device call's input arrives in its staging, and its output leaves it, in
// pieces while the host operation runs. A host operation that says so (Operation::pipelines_staging) asks
// arrived() before its steps touch staging bytes, read or written (a late piece would overwrite what a step wrote),
// and reports each output piece once no later step writes it, so that its copy out starts at once. DeviceOperation
// installs its window while it advances the host operation; elsewhere current() is nullptr.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace bagua {

class StagingWindow {
 public:
  struct Range {
    const uint8_t* data;
    size_t bytes;
  };
  virtual ~StagingWindow() = default;
  // Every input piece that overlaps one of the ranges (one step's) has been copied in.
  virtual bool arrived(const std::vector<Range>& ranges) = 0;
  virtual bool arrived_all() = 0;
  // The staging ranges that are copied out, one piece each; output_final starts a piece's copy (early: steps that
  // write other pieces are still to run).
  virtual const std::vector<Range>& output_pieces() const = 0;
  virtual void output_final(size_t piece, bool early) = 0;

  static StagingWindow* current();
  // Installs a window for the calling thread for its lifetime.
  class Scope {
   public:
    explicit Scope(StagingWindow* window);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    StagingWindow* previous_;
  };
};

}  // namespace bagua
