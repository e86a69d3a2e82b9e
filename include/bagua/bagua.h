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

#define BAGUA_VERSION_MAJOR 0
#define BAGUA_VERSION_MINOR 1
#define BAGUA_VERSION_PATCH 0
#define BAGUA_VERSION(major, minor, patch) ((major) * 10000 + (minor) * 100 + (patch))
#define BAGUA_VERSION_CODE BAGUA_VERSION(BAGUA_VERSION_MAJOR, BAGUA_VERSION_MINOR, BAGUA_VERSION_PATCH)

typedef enum {
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

typedef struct bagua_comm* bagua_comm_t;

/* Opaque; produced by bagua_get_unique_id on one process and handed to every rank. */
typedef struct {
  char internal[128];
} bagua_unique_id_t;

/* Versioned communicator configuration. Start from BAGUA_CONFIG_INITIALIZER and set what you need;
 * a field left at its initializer value takes the environment or the built-in default.
 * A caller compiled against an older header passes a smaller size; the missing fields take defaults. */
#define BAGUA_CONFIG_MAGIC 0xBA6C0F16u
#define BAGUA_CONFIG_UNDEF_INT (-2147483647 - 1)
typedef struct {
  size_t size;          /* sizeof(bagua_config_t) as the caller compiled it */
  unsigned int magic;   /* BAGUA_CONFIG_MAGIC */
  unsigned int version; /* BAGUA_VERSION_CODE as the caller compiled it */
  int timeout_ms;       /* every wait gives up after this long; default BAGUA_TIMEOUT or 30 s */
  int bind_numa;        /* 1: bind this rank's threads to its NUMA node; default BAGUA_BIND or 0 */
  const char* comm_name; /* shown in log lines; may be NULL */
} bagua_config_t;

#define BAGUA_CONFIG_INITIALIZER                                                          \
  {                                                                                       \
    sizeof(bagua_config_t), BAGUA_CONFIG_MAGIC, BAGUA_VERSION_CODE, BAGUA_CONFIG_UNDEF_INT, \
        BAGUA_CONFIG_UNDEF_INT, NULL                                                      \
  }

/* ---- status, errors, version ---- */
BAGUA_API const char* bagua_status_string(bagua_status_t status);
/* The last error message on comm, or when comm is NULL this thread's last error. Never NULL. */
BAGUA_API const char* bagua_get_last_error(bagua_comm_t comm);
BAGUA_API int bagua_get_version(void);

/* ---- communicators ---- */
BAGUA_API bagua_status_t bagua_get_unique_id(bagua_unique_id_t* id);
BAGUA_API bagua_status_t bagua_comm_init_rank(bagua_comm_t* comm, int nranks, bagua_unique_id_t id, int rank);
BAGUA_API bagua_status_t bagua_comm_init_rank_config(bagua_comm_t* comm, int nranks, bagua_unique_id_t id,
                                                     int rank, const bagua_config_t* config);
/* Reads BAGUA_* (bagua-run), torchrun, Open MPI or Slurm variables, in that order. */
BAGUA_API bagua_status_t bagua_comm_init_from_env(bagua_comm_t* comm);
/* Frees the communicator. Safe after an error or an abort; returns within about 2 s even when peers are dead. */
BAGUA_API bagua_status_t bagua_comm_destroy(bagua_comm_t comm);
/* Poisons the communicator with BAGUA_ERR_ABORTED and wakes any blocked call. Safe from any thread.
 * It does not free: call bagua_comm_destroy afterwards. */
BAGUA_API bagua_status_t bagua_comm_abort(bagua_comm_t comm);
BAGUA_API bagua_status_t bagua_comm_rank(bagua_comm_t comm, int* rank);
BAGUA_API bagua_status_t bagua_comm_size(bagua_comm_t comm, int* size);
BAGUA_API bagua_status_t bagua_comm_local_rank(bagua_comm_t comm, int* local_rank);
BAGUA_API bagua_status_t bagua_comm_local_size(bagua_comm_t comm, int* local_size);

/* ---- collectives ---- */
/* stream: a cudaStream_t as void*, used for device memory only; host calls complete before returning. */
BAGUA_API bagua_status_t bagua_barrier(bagua_comm_t comm, void* stream);

#ifdef __cplusplus
}
#endif

#endif /* BAGUA_BAGUA_H */
