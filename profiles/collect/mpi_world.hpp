// The MPI job the collectors run in: initialised on first use (MPI_THREAD_MULTIPLE when
// available, for the overlap measurements), finalised by whoever initialised it.
#pragma once

#include <string>
#include <vector>

#include <mpi.h>

namespace fsdptune::collect {

class MpiWorld {
 public:
  MpiWorld();  // MPI_Init_thread unless MPI is initialised already
  ~MpiWorld();
  MpiWorld(const MpiWorld&) = delete;
  MpiWorld& operator=(const MpiWorld&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  bool thread_multiple() const { return thread_multiple_; }
  MPI_Comm comm() const { return MPI_COMM_WORLD; }

  // Seconds a wait for other ranks may last before every rank is aborted (MPI_Abort, with a
  // message naming the rank and what it waited for): a rank that stops responding would
  // leave the others waiting forever (found by QA: `profile --backend cpu` hung). 0: none.
  void set_timeout(double seconds) { timeout_s_ = seconds; }
  // Waits for `request` as the cpu executor does (poll_until), within the timeout;
  // `doing` names what it waits for if it aborts.
  void wait(MPI_Request& request, const char* call, const char* doing) const;

  void barrier() const;
  // Element-wise maximum over ranks, in place. REQUIRES: the same size on every rank.
  void max_over_ranks(std::vector<double>& values) const;
  double max_over_ranks(double value) const;
  // Every rank's `values` concatenated in rank order, on every rank. REQUIRES: the same
  // size on every rank.
  std::vector<double> gather_from_ranks(const std::vector<double>& values) const;
  // Rank 0's string on every rank.
  std::string broadcast(const std::string& text) const;

 private:
  double timeout_s_ = 0;
  bool initialised_here_ = false;
  bool thread_multiple_ = false;
  int rank_ = 0;
  int size_ = 1;
};

// Throws Error(kRuntime) naming `call` when an MPI call fails.
void check_mpi(int status, const char* call);

}  // namespace fsdptune::collect
