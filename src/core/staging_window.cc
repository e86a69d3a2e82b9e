#include "core/staging_window.h"

namespace bagua {

namespace {
thread_local StagingWindow* t_window = nullptr;
}  // namespace

StagingWindow* StagingWindow::current() { return t_window; }

StagingWindow::Scope::Scope(StagingWindow* window) : previous_(t_window) { t_window = window; }
StagingWindow::Scope::~Scope() { t_window = previous_; }

}  // namespace bagua
