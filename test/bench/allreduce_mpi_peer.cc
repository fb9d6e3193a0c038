// OpenMPI side of tfd_bench_allreduce: times MPI_Allreduce (in place, float sum) for each buffer
// size given in bytes and prints, from rank 0, one JSON line with the median time per call.
//   mpirun -np 2 tfd_bench_allreduce_mpi_peer SECONDS BYTES...
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const double seconds = argc > 1 ? std::atof(argv[1]) : 1.0;
  std::string out = "{\"ranks\": " + std::to_string(size) + ", \"results\": [";
  for (int a = 2; a < argc; ++a) {
    const long bytes = std::atol(argv[a]);
    std::vector<float> buf(static_cast<std::size_t>(bytes / 4), 1.0f);
    for (int i = 0; i < 3; ++i) MPI_Allreduce(MPI_IN_PLACE, buf.data(), static_cast<int>(buf.size()), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    std::vector<double> times;
    const double deadline = MPI_Wtime() + seconds;
    for (int go = 1; go;) {
      MPI_Barrier(MPI_COMM_WORLD);
      const double t = MPI_Wtime();
      MPI_Allreduce(MPI_IN_PLACE, buf.data(), static_cast<int>(buf.size()), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      times.push_back(MPI_Wtime() - t);
      go = times.size() < 10 || MPI_Wtime() < deadline;
      MPI_Bcast(&go, 1, MPI_INT, 0, MPI_COMM_WORLD);  // every rank takes the same number of calls
    }
    std::sort(times.begin(), times.end());
    char item[128];
    std::snprintf(item, sizeof item, "%s{\"bytes\": %ld, \"us\": %.1f, \"calls\": %zu}", a > 2 ? ", " : "", bytes,
                  times[times.size() / 2] * 1e6, times.size());
    out += item;
  }
  out += "]}";
  if (rank == 0) std::printf("%s\n", out.c_str());
  MPI_Finalize();
  return 0;
}
