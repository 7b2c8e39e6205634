//go:build mpi

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <mpi.h>
#include "kbmpi.h"

static MPI_Comm *tab;
static int ntab;

int kb_success(void) { return MPI_SUCCESS; }
int kb_undefined(void) { return MPI_UNDEFINED; }
int kb_error_string_max(void) { return MPI_MAX_ERROR_STRING; }
int kb_library_version_max(void) { return MPI_MAX_LIBRARY_VERSION_STRING; }
int kb_thread_single(void) { return MPI_THREAD_SINGLE; }
int kb_thread_funneled(void) { return MPI_THREAD_FUNNELED; }
int kb_thread_serialized(void) { return MPI_THREAD_SERIALIZED; }
int kb_thread_multiple(void) { return MPI_THREAD_MULTIPLE; }

static int get(int h, MPI_Comm *c) {
	if (h < 0 || h >= ntab || tab[h] == MPI_COMM_NULL) {
		return KB_ERR_HANDLE;
	}
	*c = tab[h];
	return MPI_SUCCESS;
}

// put stores c in a free slot of the table (never slot 0).
static int put(MPI_Comm c, int *h) {
	for (int i = 1; i < ntab; i++) {
		if (tab[i] == MPI_COMM_NULL) {
			tab[i] = c;
			*h = i;
			return MPI_SUCCESS;
		}
	}
	int n = ntab * 2;
	MPI_Comm *t = realloc(tab, (size_t)n * sizeof *t);
	if (t == NULL) {
		return KB_ERR_NOMEM;
	}
	for (int i = ntab; i < n; i++) {
		t[i] = MPI_COMM_NULL;
	}
	tab = t;
	*h = ntab;
	tab[ntab] = c;
	ntab = n;
	return MPI_SUCCESS;
}

/* tab_init allocates the handle table on first use (8 slots, all
   MPI_COMM_NULL); non-zero when out of memory. */
static int tab_init(void) {
	if (tab != NULL) {
		return 0;
	}
	tab = malloc(8 * sizeof *tab);
	if (tab == NULL) {
		return -1;
	}
	ntab = 8;
	for (int i = 0; i < ntab; i++) {
		tab[i] = MPI_COMM_NULL;
	}
	return 0;
}

int kb_init(int *provided, int *required) {
	int flag = 0, rc;
	*required = MPI_THREAD_FUNNELED;
	if (tab_init() != 0) {
		return KB_ERR_NOMEM;
	}
	rc = MPI_Initialized(&flag);
	if (rc != MPI_SUCCESS) {
		return rc;
	}
	if (flag) {
		// Another part of the program initialised MPI: use it as it is.
		rc = MPI_Query_thread(provided);
	} else {
		// Open MPI's own SIGSEGV/SIGBUS handlers would replace the Go
		// runtime's (and lack SA_ONSTACK); leave signals to Go unless
		// the user chose otherwise.
		setenv("OMPI_MCA_opal_signal", "", 0);
		rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, provided);
	}
	if (rc != MPI_SUCCESS) {
		return rc;
	}
	rc = MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
	if (rc != MPI_SUCCESS) {
		return rc;
	}
	tab[0] = MPI_COMM_WORLD;
	return MPI_SUCCESS;
}

int kb_finalize(void) {
	for (int i = 1; i < ntab; i++) {
		if (tab[i] != MPI_COMM_NULL) {
			MPI_Comm_free(&tab[i]);
			tab[i] = MPI_COMM_NULL;
		}
	}
	tab[0] = MPI_COMM_NULL;
	return MPI_Finalize();
}

int kb_rank(int h, int *rank) {
	MPI_Comm c;
	int rc = get(h, &c);
	return rc != MPI_SUCCESS ? rc : MPI_Comm_rank(c, rank);
}

int kb_size(int h, int *size) {
	MPI_Comm c;
	int rc = get(h, &c);
	return rc != MPI_SUCCESS ? rc : MPI_Comm_size(c, size);
}

int kb_barrier(int h) {
	MPI_Comm c;
	int rc = get(h, &c);
	return rc != MPI_SUCCESS ? rc : MPI_Barrier(c);
}

// idle_stop: set once by kb_idle_stop (an abort), never cleared.
static int idle_stop;

// kb_idle_stop makes every kb_idle_barrier, now and later, return
// KB_ERR_STOPPED at its next test: safe from any thread.
void kb_idle_stop(void) { __atomic_store_n(&idle_stop, 1, __ATOMIC_RELAXED); }

// kb_idle_barrier is MPI_Ibarrier on h, then MPI_Test with a sleep
// between tests: first first_ns, each twice the last, up to max_ns. The
// whole wait is one call, on this thread: no wakeup but the test's.
int kb_idle_barrier(int h, long first_ns, long max_ns) {
	MPI_Comm c;
	MPI_Request r;
	int done = 0, rc = get(h, &c);
	if (rc != MPI_SUCCESS || (rc = MPI_Ibarrier(c, &r)) != MPI_SUCCESS) {
		return rc;
	}
	for (long ns = first_ns < max_ns ? first_ns : max_ns;; ns = 2 * ns < max_ns ? 2 * ns : max_ns) {
		if ((rc = MPI_Test(&r, &done, MPI_STATUS_IGNORE)) != MPI_SUCCESS || done) {
			return rc;
		}
		if (__atomic_load_n(&idle_stop, __ATOMIC_RELAXED)) {
			return KB_ERR_STOPPED;
		}
		struct timespec ts = {ns / 1000000000L, ns % 1000000000L};
		nanosleep(&ts, NULL);
	}
}

int kb_bcast(int h, void *buf, int count, int root) {
	MPI_Comm c;
	int rc = get(h, &c);
	return rc != MPI_SUCCESS ? rc : MPI_Bcast(buf, count, MPI_BYTE, root, c);
}

int kb_send(int h, void *buf, int count, int dest, int tag) {
	MPI_Comm c;
	int rc = get(h, &c);
	return rc != MPI_SUCCESS ? rc : MPI_Send(buf, count, MPI_BYTE, dest, tag, c);
}

int kb_recv(int h, void *buf, int count, int src, int tag) {
	MPI_Comm c;
	int rc = get(h, &c);
	return rc != MPI_SUCCESS ? rc : MPI_Recv(buf, count, MPI_BYTE, src, tag, c, MPI_STATUS_IGNORE);
}

// kb_allreduce_i64 is kb_allreduce_i64s of one value, in out.
int kb_allreduce_i64(int h, int64_t in, int64_t *out, int op) {
	*out = in;
	return kb_allreduce_i64s(h, out, 1, op);
}

int kb_allreduce_i64s(int h, int64_t *buf, int n, int op) {
	MPI_Comm c;
	MPI_Op o;
	int rc = get(h, &c);
	if (rc != MPI_SUCCESS) {
		return rc;
	}
	switch (op) {
	case 0: o = MPI_MIN; break;
	case 1: o = MPI_MAX; break;
	case 2: o = MPI_SUM; break;
	case 3: o = MPI_BOR; break;
	default: return MPI_ERR_OP;
	}
	return MPI_Allreduce(MPI_IN_PLACE, buf, n, MPI_INT64_T, o, c);
}

// adopt sets MPI_ERRORS_RETURN on a new communicator and stores it;
// MPI_COMM_NULL gives *newh = -1.
static int adopt(MPI_Comm n, int *newh) {
	int rc;
	*newh = -1;
	if (n == MPI_COMM_NULL) {
		return MPI_SUCCESS;
	}
	rc = MPI_Comm_set_errhandler(n, MPI_ERRORS_RETURN);
	if (rc == MPI_SUCCESS) {
		rc = put(n, newh);
	}
	if (rc != MPI_SUCCESS) {
		MPI_Comm_free(&n);
	}
	return rc;
}

int kb_split(int h, int color, int key, int *newh) {
	MPI_Comm c, n = MPI_COMM_NULL;
	int rc = get(h, &c);
	if (rc != MPI_SUCCESS) {
		return rc;
	}
	rc = MPI_Comm_split(c, color, key, &n);
	return rc != MPI_SUCCESS ? rc : adopt(n, newh);
}

int kb_split_shared(int h, int key, int *newh) {
	MPI_Comm c, n = MPI_COMM_NULL;
	int rc = get(h, &c);
	if (rc != MPI_SUCCESS) {
		return rc;
	}
	rc = MPI_Comm_split_type(c, MPI_COMM_TYPE_SHARED, key, MPI_INFO_NULL, &n);
	return rc != MPI_SUCCESS ? rc : adopt(n, newh);
}

int kb_free(int h) {
	MPI_Comm c;
	int rc = get(h, &c);
	if (rc != MPI_SUCCESS) {
		return rc;
	}
	if (h == 0) {
		return MPI_ERR_COMM; // MPI_COMM_WORLD cannot be freed
	}
	rc = MPI_Comm_free(&tab[h]);
	tab[h] = MPI_COMM_NULL;
	return rc;
}

int kb_abort(int h, int code) {
	MPI_Comm c = MPI_COMM_WORLD;
	get(h, &c);
	return MPI_Abort(c, code);
}

void kb_error_string(int code, char *buf, int buflen, int *klass) {
	int n = 0;
	buf[0] = '\0';
	*klass = -1;
	if (buflen < MPI_MAX_ERROR_STRING) {
		return;
	}
	if (MPI_Error_string(code, buf, &n) == MPI_SUCCESS && n >= 0 && n < buflen) {
		buf[n] = '\0';
	} else {
		buf[0] = '\0';
	}
	if (MPI_Error_class(code, klass) != MPI_SUCCESS) {
		*klass = -1;
	}
}

int kb_library_version(char *buf, int buflen) {
	int n = 0, rc;
	buf[0] = '\0';
	if (buflen < MPI_MAX_LIBRARY_VERSION_STRING) {
		return MPI_ERR_ARG;
	}
	rc = MPI_Get_library_version(buf, &n);
	if (rc == MPI_SUCCESS && n >= 0 && n < buflen) {
		buf[n] = '\0';
	}
	return rc;
}

// kb_build_family names the MPI ABI this code was compiled against: the
// MPI-5 standard ABI (mpicc_abi: mpi.h defines MPI_ABI_VERSION), Open
// MPI's, or MPICH's (libmpi.so.12: MPICH, Intel MPI, MVAPICH, Cray MPICH).
const char *kb_build_family(void) {
#if defined(MPI_ABI_VERSION)
	return "mpi-abi";
#elif defined(OPEN_MPI)
	return "openmpi";
#elif defined(MPICH_VERSION) || defined(MPICH)
	return "mpich";
#else
	return "other";
#endif
}

// kb_runtime_is_build reports whether the MPI library the process runs is
// of the family this code was compiled for. A library loaded into a
// program (Python) binds its MPI symbols to whichever libmpi the program
// loaded first, which may be another MPI with another ABI (handles of
// other types and values): then any call with a handle crashes. Only
// MPI_Get_library_version is called, with a buffer larger than any MPI's
// MPI_MAX_LIBRARY_VERSION_STRING (its signature is the same everywhere).
static char runtime_version[16384];

// kb_runtime_version is the version text kb_runtime_is_build read.
const char *kb_runtime_version(void) { return runtime_version; }

int kb_runtime_is_build(void) {
	char *v = runtime_version;
	int n = 0, ompi;
	memset(v, 0, sizeof runtime_version);
	if (MPI_Get_library_version(v, &n) != MPI_SUCCESS) {
		return 0;
	}
	v[sizeof runtime_version - 1] = '\0';
	ompi = strstr(v, "Open MPI") != NULL;
#if defined(MPI_ABI_VERSION)
	return 1; // libmpi_abi.so: every library of the standard ABI has the same handles
#elif defined(OPEN_MPI)
	return ompi;
#else
	return !ompi; // MPICH and the MPIs of its ABI (Intel MPI, Cray MPICH, ...)
#endif
}

// kb_adopt is kb_init for a library inside a program that initialised MPI
// itself (Python with mpi4py): it does not initialise MPI nor change
// MPI_COMM_WORLD's error handler. *flag says whether MPI is initialised
// (1), not yet (0) or already finalised (2). It returns KB_ERR_ABI, having
// made no other MPI call, when the process runs another MPI than the one
// this code was compiled for.
int kb_adopt(int *provided, int *required, int *flag) {
	int init = 0, fin = 0, rc;
	*required = MPI_THREAD_SERIALIZED;
	*provided = MPI_THREAD_SINGLE;
	*flag = 0;
	if (!kb_runtime_is_build()) {
		return KB_ERR_ABI;
	}
	rc = MPI_Finalized(&fin);
	if (rc != MPI_SUCCESS) {
		return rc;
	}
	if (fin) {
		*flag = 2;
		return MPI_SUCCESS;
	}
	rc = MPI_Initialized(&init);
	if (rc != MPI_SUCCESS || !init) {
		return rc;
	}
	*flag = 1;
	if (tab_init() != 0) {
		return KB_ERR_NOMEM;
	}
	tab[0] = MPI_COMM_WORLD;
	return MPI_Query_thread(provided);
}

// kb_dup_f duplicates the communicator whose Fortran handle is f (the
// caller's stays untouched) and stores the copy, with MPI_ERRORS_RETURN.
// Collective over that communicator.
int kb_dup_f(int64_t f, int *newh) {
#if defined(MPI_ABI_VERSION)
	// The standard ABI has no MPI_Fint in C: its integer handles are
	// MPI_Comm_toint's (MPI 5.0, 19.3.4).
	MPI_Comm c = MPI_Comm_fromint((int)f), n = MPI_COMM_NULL;
#else
	MPI_Comm c = MPI_Comm_f2c((MPI_Fint)f), n = MPI_COMM_NULL;
#endif
	int rc, inter = 0;
	*newh = -1;
	if (c == MPI_COMM_NULL) {
		return MPI_ERR_COMM;
	}
	rc = MPI_Comm_test_inter(c, &inter);
	if (rc != MPI_SUCCESS) {
		return rc;
	}
	if (inter) {
		return MPI_ERR_COMM;
	}
	rc = MPI_Comm_dup(c, &n);
	return rc != MPI_SUCCESS ? rc : adopt(n, newh);
}

#define KB_STR2(x) #x
#define KB_STR(x) KB_STR2(x)

// kb_build_header names the mpi.h this code was compiled with.
const char *kb_build_header(void) {
#if defined(MPI_ABI_VERSION) && defined(MPICH_VERSION)
	return "MPI ABI " KB_STR(MPI_ABI_VERSION) "." KB_STR(MPI_ABI_SUBVERSION) " (mpi.h of MPICH " MPICH_VERSION ")";
#elif defined(MPI_ABI_VERSION)
	return "MPI ABI " KB_STR(MPI_ABI_VERSION) "." KB_STR(MPI_ABI_SUBVERSION);
#elif defined(OPEN_MPI)
	return "Open MPI " KB_STR(OMPI_MAJOR_VERSION) "." KB_STR(OMPI_MINOR_VERSION) "." KB_STR(OMPI_RELEASE_VERSION);
#elif defined(I_MPI_VERSION)
	return "Intel MPI " I_MPI_VERSION;
#elif defined(MPICH_VERSION)
	return "MPICH " MPICH_VERSION;
#else
	return "unknown MPI";
#endif
}
