/* bcast IN OUT: the physical floor of a load, for the benchmarks
   (load.sh, nodes.sh). Rank 0 reads IN; every rank gets its bytes by
   MPI_Bcast, one per 2^31-1 bytes; the first rank of each node writes
   them to OUT (node-local). */
#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv) {
	int rank, noderank;
	long long size = 0;
	char *buf;
	MPI_Comm node;
	MPI_Init(&argc, &argv);
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
	for (long long off = 0; off < size; off += INT_MAX) {
		long long n = size - off < INT_MAX ? size - off : INT_MAX;
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
