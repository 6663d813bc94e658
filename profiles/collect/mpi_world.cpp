#include "mpi_world.hpp"

#include <fmt/format.h>

#include "fsdptune/error.hpp"

namespace fsdptune::collect {

void check_mpi(int status, const char* call) {
  if (status == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  MPI_Error_string(status, text, &length);
  throw_runtime(call, fmt::format("{} failed: {}", call, std::string(text, length)));
}

MpiWorld::MpiWorld() {
  int initialised = 0;
  check_mpi(MPI_Initialized(&initialised), "MPI_Initialized");
  int provided = MPI_THREAD_SINGLE;
  if (initialised == 0) {
    check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread");
    initialised_here_ = true;
  } else {
    check_mpi(MPI_Query_thread(&provided), "MPI_Query_thread");
  }
  thread_multiple_ = provided >= MPI_THREAD_MULTIPLE;
  check_mpi(MPI_Comm_rank(MPI_COMM_WORLD, &rank_), "MPI_Comm_rank");
  check_mpi(MPI_Comm_size(MPI_COMM_WORLD, &size_), "MPI_Comm_size");
}

MpiWorld::~MpiWorld() {
  if (!initialised_here_) return;
  int finalised = 0;
  MPI_Finalized(&finalised);
  if (finalised == 0) MPI_Finalize();
}

void MpiWorld::barrier() const { check_mpi(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier"); }

void MpiWorld::max_over_ranks(std::vector<double>& values) const {
  if (size_ == 1 || values.empty()) return;
  check_mpi(MPI_Allreduce(MPI_IN_PLACE, values.data(), static_cast<int>(values.size()), MPI_DOUBLE,
                          MPI_MAX, MPI_COMM_WORLD),
            "MPI_Allreduce");
}

double MpiWorld::max_over_ranks(double value) const {
  std::vector<double> values = {value};
  max_over_ranks(values);
  return values[0];
}

std::vector<double> MpiWorld::gather_from_ranks(const std::vector<double>& values) const {
  if (size_ == 1 || values.empty()) return values;
  std::vector<double> all(values.size() * static_cast<std::size_t>(size_));
  const int count = static_cast<int>(values.size());
  check_mpi(MPI_Allgather(values.data(), count, MPI_DOUBLE, all.data(), count, MPI_DOUBLE,
                          MPI_COMM_WORLD),
            "MPI_Allgather");
  return all;
}

std::string MpiWorld::broadcast(const std::string& text) const {
  int length = static_cast<int>(text.size());
  check_mpi(MPI_Bcast(&length, 1, MPI_INT, 0, MPI_COMM_WORLD), "MPI_Bcast");
  std::string out = rank_ == 0 ? text : std::string(static_cast<std::size_t>(length), '\0');
  check_mpi(MPI_Bcast(out.data(), length, MPI_CHAR, 0, MPI_COMM_WORLD), "MPI_Bcast");
  return out;
}

}  // namespace fsdptune::collect
