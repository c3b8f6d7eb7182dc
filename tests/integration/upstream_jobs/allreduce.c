/* The MPI program a user writes and compiles with the cluster's Open MPI module: each rank
 * adds its rank + 1 with MPI_Allreduce; rank 0 prints the sum and the hosts taking part. */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
    int rank, size, len, sum = 0, value;
    char host[MPI_MAX_PROCESSOR_NAME], hosts[64][MPI_MAX_PROCESSOR_NAME];

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Get_processor_name(host, &len);
    value = rank + 1;
    MPI_Allreduce(&value, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (size <= 64)
        MPI_Gather(host, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, hosts, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, 0,
                   MPI_COMM_WORLD);
    if (rank == 0) {
        int nodes = 0;
        for (int i = 0; i < size && size <= 64; i++) {
            int seen = 0;
            for (int j = 0; j < i; j++)
                seen |= strcmp(hosts[i], hosts[j]) == 0;
            nodes += !seen;
        }
        printf("mpi allreduce ok: %d ranks on %d nodes, sum %d\n", size, nodes, sum);
    }
    MPI_Finalize();
    return sum == size * (size + 1) / 2 ? 0 : 1;
}
