// C side of package mpi. MPI handle types differ between MPI libraries
// (an int in MPICH, a pointer in Open MPI), so communicators stay here in
// a table and Go refers to them by index. Index 0 is MPI_COMM_WORLD.
#ifndef KBMPI_H
#define KBMPI_H

#include <stdint.h>

// KB_ERR_HANDLE is returned for a table index that names no communicator.
#define KB_ERR_HANDLE (-1)
// KB_ERR_NOMEM is returned when the communicator table cannot grow.
#define KB_ERR_NOMEM (-2)
// KB_ERR_ABI is returned by kb_adopt when the process runs another MPI
// library than the one this code was compiled against.
#define KB_ERR_ABI (-3)
// KB_ERR_STOPPED is returned by kb_idle_barrier once kb_idle_stop was
// called (the job is being aborted).
#define KB_ERR_STOPPED (-4)

int kb_success(void);
const char *kb_build_header(void);
int kb_init(int *provided, int *required);
int kb_finalize(void);
int kb_rank(int h, int *rank);
int kb_size(int h, int *size);
int kb_barrier(int h);
int kb_idle_barrier(int h, long first_ns, long max_ns);
void kb_idle_stop(void);
int kb_bcast(int h, void *buf, int count, int root);
int kb_send(int h, void *buf, int count, int dest, int tag);
int kb_recv(int h, void *buf, int count, int src, int tag);
int kb_allreduce_i64(int h, int64_t in, int64_t *out, int op);
int kb_allreduce_i64s(int h, int64_t *buf, int n, int op);
int kb_split(int h, int color, int key, int *newh);
int kb_split_shared(int h, int key, int *newh);
int kb_free(int h);
int kb_abort(int h, int code);
int kb_undefined(void);
void kb_error_string(int code, char *buf, int buflen, int *klass);
int kb_error_string_max(void);
int kb_library_version(char *buf, int buflen);
int kb_library_version_max(void);
// Adopting an MPI initialised by the program (kbmpi.c, adopt_cgo.go).
int kb_adopt(int *provided, int *required, int *flag);
const char *kb_build_family(void);
int kb_runtime_is_build(void);
const char *kb_runtime_version(void);
int kb_dup_f(int64_t f, int *newh);
int kb_thread_single(void);
int kb_thread_funneled(void);
int kb_thread_serialized(void);
int kb_thread_multiple(void);

#endif
