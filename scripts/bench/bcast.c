/* bcast IN OUT [CHUNK]: the sequential baseline of a load, for the
   benchmarks (load.sh, nodes.sh). Rank 0 reads IN; every rank gets its
   bytes by MPI_Bcast, one call per CHUNK bytes (default and at most
   2^31-1: one call for the whole file below 2 GiB; nodes.sh also runs it
   with 8 MiB, the chunk kbundle's load broadcasts); the first rank of each
   node writes them to OUT (node-local). Nothing overlaps: the read, the
   broadcast and the write follow each other. */
#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv) {
	int rank, noderank;
	long long size = 0, chunk = INT_MAX;
	char *buf;
	MPI_Comm node;
	MPI_Init(&argc, &argv);
	if (argc < 3) MPI_Abort(MPI_COMM_WORLD, 2);
	if (argc > 3) chunk = atoll(argv[3]);
	if (chunk <= 0 || chunk > INT_MAX) MPI_Abort(MPI_COMM_WORLD, 2);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
	MPI_Comm_rank(node, &noderank);
	FILE *f = NULL;
	if (rank == 0) {
		f = fopen(argv[1], "rb");
		if (!f) MPI_Abort(MPI_COMM_WORLD, 1);
		fseek(f, 0, SEEK_END);
		size = ftell(f);
		rewind(f);
	}
	MPI_Bcast(&size, 1, MPI_LONG_LONG, 0, MPI_COMM_WORLD);
	buf = malloc(size ? size : 1);
	if (rank == 0 && fread(buf, 1, size, f) != (size_t)size) MPI_Abort(MPI_COMM_WORLD, 1);
	for (long long off = 0; off < size; off += chunk) {
		long long n = size - off < chunk ? size - off : chunk;
		MPI_Bcast(buf + off, (int)n, MPI_BYTE, 0, MPI_COMM_WORLD);
	}
	if (noderank == 0) {
		FILE *o = fopen(argv[2], "wb");
		if (!o || fwrite(buf, 1, size, o) != (size_t)size || fclose(o)) MPI_Abort(MPI_COMM_WORLD, 1);
	}
	MPI_Comm_free(&node);
	MPI_Finalize();
	return 0;
}
