/*
 * bagua: collective communication with a plain C API.
 *
 * The only public header. Plain C99; every handle is opaque and every call returns a bagua_status_t.
 * After an error, bagua_get_last_error() gives a human-readable message.
 */
#ifndef BAGUA_BAGUA_H
#define BAGUA_BAGUA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define BAGUA_API __attribute__((visibility("default")))
#else
#define BAGUA_API
#endif

#include "bagua/version.h" /* BAGUA_VERSION_MAJOR, _MINOR, _PATCH, generated from project(VERSION) */
#define BAGUA_VERSION(major, minor, patch) ((major)*10000 + (minor)*100 + (patch))
#define BAGUA_VERSION_CODE BAGUA_VERSION(BAGUA_VERSION_MAJOR, BAGUA_VERSION_MINOR, BAGUA_VERSION_PATCH)

/* In C++ the enums take int as their fixed underlying type, so a value outside the listed ones (which the
 * library refuses with BAGUA_ERR_INVALID_ARGUMENT) is still a valid value of the type, as it is in C. */
#ifdef __cplusplus
#define BAGUA_ENUM_BASE : int
#else
#define BAGUA_ENUM_BASE
#endif

typedef enum BAGUA_ENUM_BASE {
  BAGUA_SUCCESS = 0,
  BAGUA_IN_PROGRESS = 1,
  BAGUA_ERR_INVALID_ARGUMENT = -1,
  BAGUA_ERR_INVALID_USAGE = -2,
  BAGUA_ERR_SYSTEM = -3,
  BAGUA_ERR_INTERNAL = -4,
  BAGUA_ERR_REMOTE = -5, /* a peer died or the network broke */
  BAGUA_ERR_TIMEOUT = -6,
  BAGUA_ERR_NOT_SUPPORTED = -7,
  BAGUA_ERR_CUDA = -8,
  BAGUA_ERR_ABORTED = -9
} bagua_status_t;

typedef enum BAGUA_ENUM_BASE {
  BAGUA_INT8 = 0,
  BAGUA_UINT8 = 1,
  BAGUA_INT32 = 2,
  BAGUA_UINT32 = 3,
  BAGUA_INT64 = 4,
  BAGUA_UINT64 = 5,
  BAGUA_FLOAT16 = 6,
  BAGUA_BFLOAT16 = 7,
  BAGUA_FLOAT32 = 8,
  BAGUA_FLOAT64 = 9
} bagua_datatype_t;

/* Integer avg is the sum divided by nranks, truncating toward zero; signed overflow wraps.
 * fp16/bf16 partial sums are computed in fp32 and rounded to the wire type once per hop. */
typedef enum BAGUA_ENUM_BASE {
  BAGUA_SUM = 0,
  BAGUA_PROD = 1,
  BAGUA_MIN = 2,
  BAGUA_MAX = 3,
  BAGUA_AVG = 4
} bagua_redop_t;

typedef struct bagua_comm* bagua_comm_t;
/* A non-blocking operation. Finish it with bagua_wait, or bagua_test until done=1; either frees it. */
typedef struct bagua_request* bagua_request_t;

/* Opaque; produced by bagua_get_unique_id on one process and handed to every rank. */
typedef struct {
  char internal[128];
} bagua_unique_id_t;

/* Versioned communicator configuration. Start from BAGUA_CONFIG_INITIALIZER and set what you need;
 * a field left at its initializer value takes the environment or the built-in default.
 * A caller compiled against an older header passes a smaller size; the missing fields take defaults.
 * Fields are laid out without padding between them; new fields are only ever appended. */
#define BAGUA_CONFIG_MAGIC 0xBA6C0F16u
#define BAGUA_CONFIG_UNDEF_INT (-2147483647 - 1)
typedef struct {
  size_t size;           /* sizeof(bagua_config_t) as the caller compiled it */
  unsigned int magic;    /* BAGUA_CONFIG_MAGIC */
  unsigned int version;  /* BAGUA_VERSION_CODE as the caller compiled it */
  int timeout_ms;        /* every wait gives up after this long; default BAGUA_TIMEOUT or 30 s */
  int bind_numa;         /* 1: bind this rank's threads to its NUMA node; default BAGUA_BIND or 0 */
  const char* comm_name; /* shown in log lines; may be NULL */
} bagua_config_t;

#define BAGUA_CONFIG_INITIALIZER                                                                                    \
  {                                                                                                                 \
    sizeof(bagua_config_t), BAGUA_CONFIG_MAGIC, BAGUA_VERSION_CODE, BAGUA_CONFIG_UNDEF_INT, BAGUA_CONFIG_UNDEF_INT, \
        NULL                                                                                                        \
  }

/* ---- status, errors, version ---- */
BAGUA_API const char* bagua_status_string(bagua_status_t status);
/* The last error message on comm, or when comm is NULL this thread's last error. Never NULL. */
BAGUA_API const char* bagua_get_last_error(bagua_comm_t comm);
BAGUA_API int bagua_get_version(void);

/* ---- communicators ---- */
BAGUA_API bagua_status_t bagua_get_unique_id(bagua_unique_id_t* id);
BAGUA_API bagua_status_t bagua_comm_init_rank(bagua_comm_t* comm, int nranks, bagua_unique_id_t id, int rank);
BAGUA_API bagua_status_t bagua_comm_init_rank_config(bagua_comm_t* comm, int nranks, bagua_unique_id_t id, int rank,
                                                     const bagua_config_t* config);
/* Reads BAGUA_* (bagua-run), torchrun, Open MPI or Slurm variables, in that order. */
BAGUA_API bagua_status_t bagua_comm_init_from_env(bagua_comm_t* comm);
/* Frees the communicator. Safe after an error or an abort; returns within about 2 s even when peers are dead.
 * Requests of it still out stay valid: bagua_wait or bagua_test frees each, returning its operation's outcome, or
 * BAGUA_ERR_ABORTED (output undefined) where it had not completed. */
BAGUA_API bagua_status_t bagua_comm_destroy(bagua_comm_t comm);
/* Poisons the communicator with BAGUA_ERR_ABORTED and wakes any blocked call, also those of the bucket schedulers and
 * asynchronous averaging made from it (which run on splits of their own). Safe from any thread.
 * It does not free: call bagua_comm_destroy afterwards. */
BAGUA_API bagua_status_t bagua_comm_abort(bagua_comm_t comm);
BAGUA_API bagua_status_t bagua_comm_rank(bagua_comm_t comm, int* rank);
BAGUA_API bagua_status_t bagua_comm_size(bagua_comm_t comm, int* size);
BAGUA_API bagua_status_t bagua_comm_local_rank(bagua_comm_t comm, int* local_rank);
BAGUA_API bagua_status_t bagua_comm_local_size(bagua_comm_t comm, int* local_size);

/* Operation kinds, the index into bagua_stats_t.ops. */
typedef enum BAGUA_ENUM_BASE {
  BAGUA_OPKIND_SEND = 0,
  BAGUA_OPKIND_RECV = 1,
  BAGUA_OPKIND_BARRIER = 2,
  BAGUA_OPKIND_ALLREDUCE = 3,
  BAGUA_OPKIND_REDUCE_SCATTER = 4,
  BAGUA_OPKIND_ALLGATHER = 5,
  BAGUA_OPKIND_BROADCAST = 6,
  BAGUA_OPKIND_REDUCE = 7,
  BAGUA_OPKIND_ALLTOALL = 8,
  BAGUA_OPKIND_ALLTOALLV = 9,
  BAGUA_OPKIND_GATHER = 10,
  BAGUA_OPKIND_SCATTER = 11,
  BAGUA_OPKIND_QUANTIZED_ALLREDUCE = 12,
  BAGUA_OPKIND_NEIGHBOR_ALLREDUCE = 13,
  BAGUA_OPKIND_COUNT = 16 /* room to grow without changing the struct */
} bagua_opkind_t;

/* Traffic counters. Set size = sizeof(bagua_stats_t) before the call (older callers pass less). */
typedef struct {
  size_t size;
  uint64_t bytes_sent;     /* payload bytes this rank handed to the transport */
  uint64_t bytes_received; /* payload bytes this rank received */
  uint64_t messages_sent;
  uint64_t messages_received;
  uint64_t ops[BAGUA_OPKIND_COUNT]; /* operations completed, by bagua_opkind_t */
  uint64_t bytes_sent_by_op[BAGUA_OPKIND_COUNT];
  uint64_t compute_ns; /* time spent in compression kernels (compress, decompress, owner step) */
  /* quantized allreduce calls below BAGUA_QUANTIZED_MIN_BYTES, sent at full precision (counted in
     ops[BAGUA_OPKIND_QUANTIZED_ALLREDUCE] too) */
  uint64_t quantized_full_precision;
} bagua_stats_t;

/* Poisoning error of the communicator (BAGUA_SUCCESS while healthy); checks for a dead peer without blocking. */
BAGUA_API bagua_status_t bagua_comm_get_async_error(bagua_comm_t comm, bagua_status_t* async_error);
BAGUA_API bagua_status_t bagua_comm_get_stats(bagua_comm_t comm, bagua_stats_t* stats);
/* Writes the flight recorder: the communicator's last BAGUA_TRACE_SIZE operations (each one's description: the
 * operation, its sequence number, size and algorithm; start and end times, state, and what an unfinished one
 * waits for) to the file path; NULL: to a file
 * per rank in BAGUA_TRACE_DIR when set, else to the log. Works on a failed communicator too. On failure every rank
 * writes it by itself. `bagua-trace DIR` merges the ranks' files (docs/tracing.md). */
BAGUA_API bagua_status_t bagua_comm_dump_trace(bagua_comm_t comm, const char* path);

/* ---- operations ----
 * Argument order and in-place rules follow NCCL. Every rank ends with bitwise identical results.
 * Memory is detected per pointer. Host memory: the call completes before returning and stream is ignored.
 * CUDA device (or managed) memory: the call is ordered on stream (a cudaStream_t as void*; NULL is the legacy
 * default stream) as in NCCL: it returns once enqueued, reads its input after the stream's earlier work, and the
 * stream's later work sees its results. One call's buffers are all host or all device memory of one device; ranks
 * may differ. Ranks that are threads of one process need a stream each. A failed or aborted communicator releases
 * every stream it holds. docs/cuda.md has the rules (groups, graphs, memory limit).
 * Inside bagua_group_start/end, blocking calls are posted and complete in bagua_group_end (device calls are
 * enqueued there). */
#define BAGUA_SPLIT_NOCOLOR (-1)

BAGUA_API bagua_status_t bagua_barrier(bagua_comm_t comm, void* stream);
/* In place when sendbuf == recvbuf. */
BAGUA_API bagua_status_t bagua_allreduce(const void* sendbuf, void* recvbuf, size_t count, bagua_datatype_t dtype,
                                         bagua_redop_t op, bagua_comm_t comm, void* stream);
/* sendbuf holds nranks * recvcount; rank r receives block r. In place when recvbuf == sendbuf + r * recvcount. */
BAGUA_API bagua_status_t bagua_reduce_scatter(const void* sendbuf, void* recvbuf, size_t recvcount,
                                              bagua_datatype_t dtype, bagua_redop_t op, bagua_comm_t comm,
                                              void* stream);
/* recvbuf holds nranks * sendcount. In place when sendbuf == recvbuf + r * sendcount. */
BAGUA_API bagua_status_t bagua_allgather(const void* sendbuf, void* recvbuf, size_t sendcount, bagua_datatype_t dtype,
                                         bagua_comm_t comm, void* stream);
/* sendbuf is read on root only. In place when sendbuf == recvbuf on root. */
BAGUA_API bagua_status_t bagua_broadcast(const void* sendbuf, void* recvbuf, size_t count, bagua_datatype_t dtype,
                                         int root, bagua_comm_t comm, void* stream);
/* recvbuf is written on root only (may be NULL elsewhere). */
BAGUA_API bagua_status_t bagua_reduce(const void* sendbuf, void* recvbuf, size_t count, bagua_datatype_t dtype,
                                      bagua_redop_t op, int root, bagua_comm_t comm, void* stream);
/* count elements to and from every peer; no in-place form (overlapping buffers are an invalid argument). */
BAGUA_API bagua_status_t bagua_alltoall(const void* sendbuf, void* recvbuf, size_t count, bagua_datatype_t dtype,
                                        bagua_comm_t comm, void* stream);
/* Counts and displacements in elements, one per peer. No in-place form. */
BAGUA_API bagua_status_t bagua_alltoallv(const void* sendbuf, const size_t* sendcounts, const size_t* sdispls,
                                         void* recvbuf, const size_t* recvcounts, const size_t* rdispls,
                                         bagua_datatype_t dtype, bagua_comm_t comm, void* stream);
/* root's recvbuf holds nranks * sendcount. In place on root when sendbuf == recvbuf + root * sendcount. */
BAGUA_API bagua_status_t bagua_gather(const void* sendbuf, void* recvbuf, size_t sendcount, bagua_datatype_t dtype,
                                      int root, bagua_comm_t comm, void* stream);
/* root's sendbuf holds nranks * recvcount. In place on root when recvbuf == sendbuf + root * recvcount. */
BAGUA_API bagua_status_t bagua_scatter(const void* sendbuf, void* recvbuf, size_t recvcount, bagua_datatype_t dtype,
                                       int root, bagua_comm_t comm, void* stream);
/* Point to point: the k-th send from A to B matches the k-th recv on B from A; counts must agree. */
BAGUA_API bagua_status_t bagua_send(const void* buf, size_t count, bagua_datatype_t dtype, int peer, bagua_comm_t comm,
                                    void* stream);
BAGUA_API bagua_status_t bagua_recv(void* buf, size_t count, bagua_datatype_t dtype, int peer, bagua_comm_t comm,
                                    void* stream);
/* Operations issued between these progress together and complete in bagua_group_end, which returns the first
 * error; any send/recv pattern inside a group is free of deadlock. Blocking receives into host memory start in
 * bagua_group_end after the group's other calls (or at a bagua_test/bagua_wait inside the group). Groups nest;
 * they are per thread. */
BAGUA_API bagua_status_t bagua_group_start(void);
BAGUA_API bagua_status_t bagua_group_end(void);

/* Collective over comm: ranks with the same color form a new communicator, ordered by key then by old rank.
 * color BAGUA_SPLIT_NOCOLOR gives *newcomm = NULL. The new communicator works alongside its parent. */
BAGUA_API bagua_status_t bagua_comm_split(bagua_comm_t comm, int color, int key, bagua_comm_t* newcomm);

/* After a failure (or at any time), called by every surviving rank: the survivors agree on who is alive and get a
 * new communicator of them, ranked in their old order. Every rank that succeeds gets the same membership, also when
 * more ranks die during the agreement. Only a side holding a majority of the old ranks may form it: under a network
 * partition the others get BAGUA_ERR_REMOTE saying so, as does a rank that arrives after the survivors decided.
 * The agreement is bounded by the timeout, and forming the new communicator by another. A member that dies after
 * the agreement makes that formation fail (its error says to call shrink again; every rank returns it at the end of
 * that second bound, so that their next shrinks start together) or the new communicator's first operations. Ranks must
 * call shrink on a communicator equally often. Besides abort and destroy, the one call a failed communicator accepts;
 * destroy the old communicator afterwards. Operations in flight on a healthy communicator must finish first. */
BAGUA_API bagua_status_t bagua_comm_shrink(bagua_comm_t comm, bagua_comm_t* newcomm);

/* ---- non-blocking ----
 * On device memory: the input is read after the legacy default stream's earlier work; the request completes when
 * the operation has finished (wait for it before using the output); the stream's later work is not held. The
 * output is copied back by the thread that tests or waits for the request, so it completes only through those. */
BAGUA_API bagua_status_t bagua_iallreduce(const void* sendbuf, void* recvbuf, size_t count, bagua_datatype_t dtype,
                                          bagua_redop_t op, bagua_comm_t comm, bagua_request_t* req);
BAGUA_API bagua_status_t bagua_ireduce_scatter(const void* sendbuf, void* recvbuf, size_t recvcount,
                                               bagua_datatype_t dtype, bagua_redop_t op, bagua_comm_t comm,
                                               bagua_request_t* req);
BAGUA_API bagua_status_t bagua_iallgather(const void* sendbuf, void* recvbuf, size_t sendcount, bagua_datatype_t dtype,
                                          bagua_comm_t comm, bagua_request_t* req);
BAGUA_API bagua_status_t bagua_ibroadcast(const void* sendbuf, void* recvbuf, size_t count, bagua_datatype_t dtype,
                                          int root, bagua_comm_t comm, bagua_request_t* req);
BAGUA_API bagua_status_t bagua_ireduce(const void* sendbuf, void* recvbuf, size_t count, bagua_datatype_t dtype,
                                       bagua_redop_t op, int root, bagua_comm_t comm, bagua_request_t* req);
BAGUA_API bagua_status_t bagua_ialltoall(const void* sendbuf, void* recvbuf, size_t count, bagua_datatype_t dtype,
                                         bagua_comm_t comm, bagua_request_t* req);
BAGUA_API bagua_status_t bagua_ialltoallv(const void* sendbuf, const size_t* sendcounts, const size_t* sdispls,
                                          void* recvbuf, const size_t* recvcounts, const size_t* rdispls,
                                          bagua_datatype_t dtype, bagua_comm_t comm, bagua_request_t* req);
BAGUA_API bagua_status_t bagua_igather(const void* sendbuf, void* recvbuf, size_t sendcount, bagua_datatype_t dtype,
                                       int root, bagua_comm_t comm, bagua_request_t* req);
BAGUA_API bagua_status_t bagua_iscatter(const void* sendbuf, void* recvbuf, size_t recvcount, bagua_datatype_t dtype,
                                        int root, bagua_comm_t comm, bagua_request_t* req);
BAGUA_API bagua_status_t bagua_ibarrier(bagua_comm_t comm, bagua_request_t* req);
BAGUA_API bagua_status_t bagua_isend(const void* buf, size_t count, bagua_datatype_t dtype, int peer, bagua_comm_t comm,
                                     bagua_request_t* req);
BAGUA_API bagua_status_t bagua_irecv(void* buf, size_t count, bagua_datatype_t dtype, int peer, bagua_comm_t comm,
                                     bagua_request_t* req);
/* Advances the request. done=1: it finished, is freed, and its status is returned. done=0: BAGUA_IN_PROGRESS. */
BAGUA_API bagua_status_t bagua_test(bagua_request_t req, int* done);
/* Waits (honouring the communicator timeout), frees the request, and returns its status. */
BAGUA_API bagua_status_t bagua_wait(bagua_request_t req);

/* ---- relaxations (BAGUA's system relaxations; docs/relaxations.md) ----
 * All take device memory too (docs/cuda.md): bagua_quantized_allreduce and bagua_neighbor_allreduce as the
 * collectives do (stream-ordered; a qstate's calls belong on one stream; the quantized allreduce compresses on
 * the device and keeps a qstate's error feedback in device memory); bagua_lpdec_* synchronously,
 * ordered on the legacy default stream of their buffers' (or replicas') device; asynchronous averaging on its own
 * stream, under the lock. */

/* Quantized allreduce: scatter-reduce-allgather where what crosses the wire is compressed. */
typedef enum BAGUA_ENUM_BASE {
  BAGUA_COMPRESS_MINMAX = 0, /* b-bit min-max codes per chunk (docs/formats.md "minmax v1") */
  BAGUA_COMPRESS_SIGN = 1,   /* 1 bit per element with a per-chunk scale ||x||/sqrt(d) ("sign v1") */
  BAGUA_COMPRESS_FP16 = 2,   /* fp32 rounded to fp16 on the wire */
  BAGUA_COMPRESS_BF16 = 3
} bagua_compress_kind_t;

typedef enum BAGUA_ENUM_BASE {
  /* on when the communicator spans hosts, some host has several ranks and the format sends at least 1.5 bits per
     element (so not for sign or 1-bit min-max) */
  BAGUA_HIERARCHICAL_AUTO = 0,
  BAGUA_HIERARCHICAL_ON = 1, /* inputs summed at full precision inside each host; compressed between hosts, and the
                                result compressed back inside the host (rail form) or at full precision (leader) */
  BAGUA_HIERARCHICAL_OFF = 2
} bagua_hierarchical_t;

#define BAGUA_COMPRESSION_MAGIC 0xBA6CC0DEu
/* Versioned like bagua_config_t: size, magic and version first; new fields are only appended. */
typedef struct {
  size_t size;          /* sizeof(bagua_compression_t) as the caller compiled it */
  unsigned int magic;   /* BAGUA_COMPRESSION_MAGIC */
  unsigned int version; /* BAGUA_VERSION_CODE */
  int kind;             /* bagua_compress_kind_t */
  int bits;             /* min-max: 1, 2, 4 or 8 */
  size_t chunk;         /* elements per min/max (or sign scale) chunk: 256 to 4096 */
  int stochastic;       /* min-max: stochastic rounding instead of nearest */
  uint64_t seed;        /* stochastic rounding seed (the draws also depend on step, rank and index) */
  int error_feedback;   /* 1: keep what compression lost and add it to the next step (needs a qstate) */
  int hierarchical;     /* bagua_hierarchical_t */
} bagua_compression_t;

#define BAGUA_COMPRESSION_INITIALIZER                                                                                  \
  {                                                                                                                    \
    sizeof(bagua_compression_t), BAGUA_COMPRESSION_MAGIC, BAGUA_VERSION_CODE, BAGUA_COMPRESS_MINMAX, 8, 1024, 0, 0, 0, \
        BAGUA_HIERARCHICAL_AUTO                                                                                        \
  }

/* Error-feedback buffers (the worker's, and the owner's for its reduced chunk), scratch space and the step
 * counter of one tensor, reused across steps. Local (not collective). Bound to comm, count, dtype and cfg. */
typedef struct bagua_qstate* bagua_qstate_t;
BAGUA_API bagua_status_t bagua_qstate_create(bagua_comm_t comm, size_t count, bagua_datatype_t dtype,
                                             const bagua_compression_t* cfg, bagua_qstate_t* state);
BAGUA_API bagua_status_t bagua_qstate_destroy(bagua_qstate_t state);
/* What error feedback still holds, as count floats: this rank's worker error plus, on the chunk it owns, the
 * owner error. Summed over ranks it is exactly what the outputs so far are missing from the exact sums. residual may be
 * host or device memory (written after earlier work on its device's legacy default stream; done on return). */
BAGUA_API bagua_status_t bagua_qstate_residual(bagua_qstate_t state, float* residual, size_t count);

/* op: BAGUA_SUM or BAGUA_AVG. dtype: FLOAT32, FLOAT16 or BFLOAT16 (accumulated in fp32). In place when
 * sendbuf == recvbuf. state may be NULL when error feedback is off. Every rank gets bit-identical output. */
BAGUA_API bagua_status_t bagua_quantized_allreduce(const void* sendbuf, void* recvbuf, size_t count,
                                                   bagua_datatype_t dtype, bagua_redop_t op,
                                                   const bagua_compression_t* cfg, bagua_qstate_t state,
                                                   bagua_comm_t comm, void* stream);
BAGUA_API bagua_status_t bagua_iquantized_allreduce(const void* sendbuf, void* recvbuf, size_t count,
                                                    bagua_datatype_t dtype, bagua_redop_t op,
                                                    const bagua_compression_t* cfg, bagua_qstate_t state,
                                                    bagua_comm_t comm, bagua_request_t* req);

/* Gossip (decentralized) averaging over a topology: x_i <- w_ii x_i + sum_j w_ji x_j over in-neighbours j. */
typedef enum BAGUA_ENUM_BASE {
  BAGUA_TOPO_RING = 0,                 /* both neighbours, weights 1/3 (n = 2: 1/2; n = 1: identity) */
  BAGUA_TOPO_EXPONENTIAL = 1,          /* i -> i + 2^k mod n for 2^k < n, weights 1/(1 + degree) */
  BAGUA_TOPO_ONE_PEER_EXPONENTIAL = 2, /* step s: i -> i + 2^(s mod ceil(log2 n)) mod n, weights 1/2 */
  BAGUA_TOPO_SHIFT_ONE = 3,            /* BAGUA's pairing for even n, weights 1/2 */
  BAGUA_TOPO_FULL = 4                  /* everyone, weights 1/n */
} bagua_topology_kind_t;

typedef struct bagua_topology* bagua_topology_t;
/* Local (not collective): every rank computes the same graph. */
BAGUA_API bagua_status_t bagua_topology_create(bagua_comm_t comm, bagua_topology_kind_t kind, bagua_topology_t* topo);
/* A static weighted graph: edge e sends src[e]'s vector to dst[e] with weight weights[e]; a rank's own weight is
 * 1 minus its in-weights. metropolis_hastings = 1 ignores weights (may be NULL), requires a symmetric edge list,
 * and uses w_ij = 1 / (1 + max(deg i, deg j)). Every rank must pass the same list. */
BAGUA_API bagua_status_t bagua_topology_create_from_edges(bagua_comm_t comm, int nedges, const int* src, const int* dst,
                                                          const double* weights, int metropolis_hastings,
                                                          bagua_topology_t* topo);
/* Collective: checks that every rank holds the same topology (steps 0 .. its period - 1). */
BAGUA_API bagua_status_t bagua_topology_check(bagua_topology_t topo);
BAGUA_API bagua_status_t bagua_topology_destroy(bagua_topology_t topo);

/* dtype: FLOAT32 or FLOAT64 (fp32 sums for fp32, fp64 for fp64); the sum runs self first, then in-neighbours by
 * ascending rank. In place when sendbuf == recvbuf. On a communicator whose hosts hold several ranks each,
 * a topology created with BAGUA_TOPO_* may be made hierarchical by bagua_topology_set_hierarchical. */
BAGUA_API bagua_status_t bagua_neighbor_allreduce(const void* sendbuf, void* recvbuf, size_t count,
                                                  bagua_datatype_t dtype, bagua_topology_t topo, uint64_t step,
                                                  bagua_comm_t comm, void* stream);
BAGUA_API bagua_status_t bagua_ineighbor_allreduce(const void* sendbuf, void* recvbuf, size_t count,
                                                   bagua_datatype_t dtype, bagua_topology_t topo, uint64_t step,
                                                   bagua_comm_t comm, bagua_request_t* req);
/* hierarchical = 1: average inside each host (full precision), gossip between hosts over the topology built on
 * the host count, then broadcast inside each host. Requires every host to hold the same number of ranks. */
BAGUA_API bagua_status_t bagua_topology_set_hierarchical(bagua_topology_t topo, int hierarchical);

/* Low-precision decentralized SGD (BAGUA's ring algorithm): each rank keeps replicas of itself and of both
 * ring neighbours and exchanges compressed differences (cfg: any kind, min-max by default; its hierarchical
 * field is ignored). x: count FLOAT32 weights. */
typedef struct bagua_lpdec* bagua_lpdec_t;
BAGUA_API bagua_status_t bagua_lpdec_create(bagua_comm_t comm, size_t count, const bagua_compression_t* cfg,
                                            const float* initial, bagua_lpdec_t* lpdec);
/* Collective: x <- replica average, compressed exchange of the change; x is the caller's updated weights. */
BAGUA_API bagua_status_t bagua_lpdec_step(bagua_lpdec_t lpdec, float* x);
/* which: -1 the left neighbour's replica, 0 this rank's own, +1 the right neighbour's. */
BAGUA_API bagua_status_t bagua_lpdec_replica(bagua_lpdec_t lpdec, int which, float* out, size_t count);
BAGUA_API bagua_status_t bagua_lpdec_destroy(bagua_lpdec_t lpdec);

/* Asynchronous model averaging: a background thread repeatedly sets x += avg(snapshot) - snapshot over its own
 * communicator (split from comm, so the caller's collectives are unaffected). Collective start and stop. */
typedef struct bagua_async_average* bagua_async_average_t;
BAGUA_API bagua_status_t bagua_async_average_start(bagua_comm_t comm, void* buf, size_t count, bagua_datatype_t dtype,
                                                   int interval_ms, bagua_async_average_t* handle);
/* interval_ms must be below the communicator's timeout. Guard the caller's updates of buf (and its reads that must
 * not tear) against the background thread's, holding the lock for less than the timeout (the peers' rounds wait).
 * Unlock from a thread that does not hold the lock, or stop while holding it: BAGUA_ERR_INVALID_USAGE. */
BAGUA_API bagua_status_t bagua_async_average_lock(bagua_async_average_t handle);
BAGUA_API bagua_status_t bagua_async_average_unlock(bagua_async_average_t handle);
BAGUA_API bagua_status_t bagua_async_average_stats(bagua_async_average_t handle, uint64_t* rounds);
/* Ends averaging on all ranks by agreement (ranks may call it at different times) and frees the handle, also when
 * it returns the averaging thread's failure. Only when the calling thread holds the lock is it refused
 * (BAGUA_ERR_INVALID_USAGE) with the handle kept. It does not use comm, which may be destroyed before. */
BAGUA_API bagua_status_t bagua_async_average_stop(bagua_async_average_t handle);

/* ---- bucket scheduler (docs/scheduler.md) ----
 * BAGUA's execution optimizer for any training engine: register the tensors once, mark each ready from the
 * backward hooks (any order), wait at the end of the step. The library groups the tensors into buckets, starts
 * each bucket as soon as all its tensors are ready, in registration order on every rank, on its own thread and
 * its own split of the communicator, overlapped with whatever the caller does between marks. The bucket size
 * (and, across hosts with several ranks each, flat or hierarchical communication) is tuned online. */
typedef enum BAGUA_ENUM_BASE {
  BAGUA_BUCKET_ALLREDUCE = 0,     /* gradients, full precision; op SUM or AVG; any dtype */
  BAGUA_BUCKET_QUANTIZED = 1,     /* gradients, compressed by `compression` (error feedback if it asks) */
  BAGUA_BUCKET_ONEBIT = 2,        /* gradients, 1-bit sign compression with error feedback */
  BAGUA_BUCKET_QADAM = 3,         /* gradients in; after warmup_steps, m = beta1 m + (1 - beta1) g per tensor is
                                     averaged compressed and the tensors receive it (QAdam / 1-bit Adam) */
  BAGUA_BUCKET_DECENTRALIZED = 4, /* weights, gossip averaged over `topology` (FLOAT32 or FLOAT64) */
  BAGUA_BUCKET_LOW_PRECISION_DECENTRALIZED = 5 /* weights, BAGUA's low-precision ring (FLOAT32) */
} bagua_bucket_algorithm_t;

#define BAGUA_SCHEDULER_MAGIC 0xBA6C5C4Du
/* Versioned like bagua_config_t. */
typedef struct {
  size_t size;                            /* sizeof(bagua_scheduler_config_t) as the caller compiled it */
  unsigned int magic;                     /* BAGUA_SCHEDULER_MAGIC */
  unsigned int version;                   /* BAGUA_VERSION_CODE */
  int algorithm;                          /* bagua_bucket_algorithm_t */
  int op;                                 /* ALLREDUCE, QUANTIZED, ONEBIT: BAGUA_SUM or BAGUA_AVG */
  const bagua_compression_t* compression; /* QUANTIZED, QADAM, LOW_PRECISION_DECENTRALIZED; NULL: min-max 8 bit */
  size_t bucket_bytes; /* 0: start at 4 MiB; the size where tuning starts, or the fixed size with autotune 0 */
  int autotune;        /* 1: tune the bucket size and flat/hierarchical online; 0: keep them fixed */
  int hierarchical;    /* bagua_hierarchical_t: AUTO lets the tuner choose; ON or OFF fixes it */
  int topology;        /* DECENTRALIZED: bagua_topology_kind_t */
  int warmup_steps;    /* QADAM: full-precision gradient steps before the compressed momentum ones */
  float beta1;         /* QADAM: momentum decay */
} bagua_scheduler_config_t;

#define BAGUA_SCHEDULER_CONFIG_INITIALIZER                                                                          \
  {                                                                                                                 \
    sizeof(bagua_scheduler_config_t), BAGUA_SCHEDULER_MAGIC, BAGUA_VERSION_CODE, BAGUA_BUCKET_ALLREDUCE, BAGUA_AVG, \
        NULL, 0, 1, BAGUA_HIERARCHICAL_AUTO, BAGUA_TOPO_ONE_PEER_EXPONENTIAL, 100, 0.9f                             \
  }

/* What the scheduler is doing; set size = sizeof(bagua_scheduler_info_t) before the call. */
typedef struct {
  size_t size;
  uint64_t steps;        /* steps communicated (skipped ones not counted) */
  uint64_t bucket_bytes; /* the bucket size in use */
  int buckets;           /* buckets of the current layout */
  int hierarchical;      /* 1: hierarchical communication in use */
  int tuning;            /* 1: the tuner is still trying sizes */
  int settled;           /* 1: the tuner's choice has been the same for 5 consecutive decisions */
  uint64_t decisions;    /* tuner decisions so far (every rank applies each at the same step) */
  double step_ms;        /* rank 0's last measured step time (wait to wait), broadcast with the decisions */
  uint64_t bytes_sent;   /* payload bytes the scheduler's own communicator sent (bagua_stats_t.bytes_sent) */
} bagua_scheduler_info_t;

typedef struct bagua_scheduler* bagua_scheduler_t;
/* Collective: a scheduler on its own split of comm, with its own thread. It may outlive comm. The bagua_scheduler_*
 * calls below record their errors as the thread's: read them with bagua_get_last_error(NULL). */
BAGUA_API bagua_status_t bagua_scheduler_create(bagua_comm_t comm, const bagua_scheduler_config_t* config,
                                                bagua_scheduler_t* sched);
/* Collective, once: the tensors in the order buckets should go (best: the order backward produces them).
 * Tensor i is then named by i. Every rank must pass the same counts and dtypes (INVALID_USAGE names the first
 * tensor that differs) and have created its scheduler with the same settings (INVALID_USAGE names the setting). Tensors
 * adjacent in memory in this order are communicated in place; others are copied into a bucket buffer and back. All host
 * memory, or all device memory of one device (staged through page-locked buckets on the scheduler's own stream;
 * docs/scheduler.md). */
BAGUA_API bagua_status_t bagua_scheduler_register(bagua_scheduler_t sched, int ntensors, void* const* tensors,
                                                  const size_t* counts, const bagua_datatype_t* dtypes);
/* Tensor is ready for this step (event: a cudaEvent_t to wait on for device tensors, as recorded at this call, so
 * it may be recorded again or destroyed after; NULL for host). A bucket starts when all its tensors are marked.
 * Unknown tensor, or marked twice in one step: INVALID_USAGE. */
BAGUA_API bagua_status_t bagua_scheduler_mark_ready(bagua_scheduler_t sched, int tensor, void* event);
/* Tensor takes no part in this step: it counts as zeros (and receives the result like the others).
 * Gradient algorithms only. */
BAGUA_API bagua_status_t bagua_scheduler_mark_unused(bagua_scheduler_t sched, int tensor);
/* Skip this step whole, without communicating (gradient accumulation). Before any mark; every rank alike. */
BAGUA_API bagua_status_t bagua_scheduler_skip_step(bagua_scheduler_t sched);
/* Host tensors: returns when every bucket of this step is done and its results are in the tensors. Device
 * tensors: stream-ordered, returns at once and the work enqueued on stream (a cudaStream_t; NULL the legacy
 * default stream) after it sees the results. Returns the first error of this or an earlier step (a peer's
 * failure, a timeout) with its message. Every tensor must be marked (or the step skipped). */
BAGUA_API bagua_status_t bagua_scheduler_wait(bagua_scheduler_t sched, void* stream);
/* Forces a bucket size from the next step on and stops tuning; every rank must call it between the same steps.
 * Error-feedback residuals, momentum and replicas are kept per tensor and carry over. */
BAGUA_API bagua_status_t bagua_scheduler_set_bucket_bytes(bagua_scheduler_t sched, size_t bucket_bytes);
BAGUA_API bagua_status_t bagua_scheduler_get_info(bagua_scheduler_t sched, bagua_scheduler_info_t* info);
/* The error-feedback residual of tensor (count floats): what this rank's compression still owes it. Host or device
 * memory, as bagua_qstate_residual. */
BAGUA_API bagua_status_t bagua_scheduler_residual(bagua_scheduler_t sched, int tensor, float* residual, size_t count);
/* Refused (INVALID_USAGE) while a step is in flight (marked but not waited for), unless the scheduler failed.
 * Waits (bounded) for device steps still running after their wait. */
BAGUA_API bagua_status_t bagua_scheduler_destroy(bagua_scheduler_t sched);

#ifdef __cplusplus
}
#endif

#endif /* BAGUA_BAGUA_H */
