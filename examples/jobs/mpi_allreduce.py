"""An allreduce over every rank of the job, with mpi4py on Open MPI 5, ranks started by
`srun --mpi=pmix`: each rank adds its number, every rank gets the sum; rank 0 prints who
took part and how long a 1 MiB allreduce takes."""

import socket
import time

import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
total = comm.allreduce(comm.rank + 1, op=MPI.SUM)
hosts = comm.gather(socket.gethostname(), root=0)
buffer = np.ones(1 << 17)  # 1 MiB of float64
out = np.empty_like(buffer)
comm.Barrier()
began = time.perf_counter()
for _ in range(10):
    comm.Allreduce(buffer, out, op=MPI.SUM)
took = (time.perf_counter() - began) / 10
assert total == comm.size * (comm.size + 1) // 2 and out[0] == comm.size
if comm.rank == 0:
    print(f"allreduce ok: {comm.size} ranks on {len(set(hosts))} nodes ({','.join(sorted(set(hosts)))}), "
          f"sum {total}, 1 MiB in {took * 1000:.1f} ms ({MPI.Get_library_version().splitlines()[0]})")
