/* detect_ranks: runs `KBUNDLE detect --json` BEFORE MPI_Init (the
 * environment a rank starts with, as kbundle sees it; no fork after
 * MPI_Init), then initialises MPI and prints one line:
 *
 *   KBDETECT <comm rank> <comm size> <detect JSON>
 *
 * Usage: detect_ranks KBUNDLE. Exits non-zero if detect fails. */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
    char cmd[4096], json[8192];
    size_t n = 0;
    int rank = -1, size = -1, st;
    FILE *p;

    if (argc != 2 || strlen(argv[1]) > sizeof cmd - 32) {
        fprintf(stderr, "usage: detect_ranks KBUNDLE\n");
        return 2;
    }
    snprintf(cmd, sizeof cmd, "'%s' detect --json", argv[1]);
    p = popen(cmd, "r");
    if (p == NULL) {
        perror("popen");
        return 1;
    }
    n = fread(json, 1, sizeof json - 1, p);
    json[n] = '\0';
    st = pclose(p);
    if (n > 0 && json[n - 1] == '\n')
        json[n - 1] = '\0';

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    printf("KBDETECT %d %d %s\n", rank, size, json);
    fflush(stdout);
    MPI_Finalize();
    return st == 0 ? 0 : 1;
}
