// Unions and overlaps of time intervals: the busy time of a stream whose tasks may overlap
// (a Kineto op's kernels, a replay's compute tasks) and the communication that ran beside no
// compute (a replay's exposed communication). Any unit of time, as long as it is one.
#pragma once

#include <vector>

namespace fsdptune {

struct TimeInterval {
  double start = 0;
  double end = 0;
  bool operator==(const TimeInterval&) const = default;
};

// The union of `intervals` as disjoint intervals by start; touching ones are joined.
std::vector<TimeInterval> merge_intervals(std::vector<TimeInterval> intervals);

// The summed length of disjoint intervals (merge_intervals' result).
double total_length(const std::vector<TimeInterval>& merged);

// The length of the overlap of two lists of disjoint intervals sorted by start.
double overlap_length(const std::vector<TimeInterval>& a, const std::vector<TimeInterval>& b);

}  // namespace fsdptune
