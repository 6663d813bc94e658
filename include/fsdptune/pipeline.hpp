// Pipeline parallelism (docs/parallelism.md): stages own contiguous layers, each runs the
// FSDP Program of its chunk(s), microbatches flow through a 1F1B, interleaved 1F1B or
// GPipe schedule with point-to-point activation sends between stages. Pure: no I/O.
//
// FSDP inside a stage (torchtitan's choice with PP): parameters are gathered once per step
// and stay gathered across microbatches (reshard_after_forward false), gradients
// accumulate unsharded and are reduce-scattered after the last microbatch's backward. So
// the first forward of each chunk carries the exposed all-gathers, the last backward the
// reduce-scatters, and every other microbatch is compute (with its TP collectives) only.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "fsdptune/cost_model.hpp"
#include "fsdptune/plan.hpp"
#include "fsdptune/program.hpp"
#include "fsdptune/simulator.hpp"
#include "fsdptune/workload.hpp"

namespace fsdptune {

// What one kind of a chunk's pipeline actions allocates (chunk_memory): the memory events
// of the part of the chunk's one-microbatch Program it runs (chunk_action_tasks, as
// chunk_action_event tracks them), relative to what its rank holds when it begins.
struct ActionMemory {
  std::int64_t peak_bytes = 0;  // the most allocated above the start, >= 0
  std::int64_t held_bytes = 0;  // allocated at its end less at its start
  // The most the simulator's reserved estimate (docs/plan-format.md "Reserved memory") of
  // its own events reaches: their segment-rounded sizes, the sharded state's as they are
  // and the others' x (1 + fragmentation).
  std::int64_t peak_reserved_bytes = 0;
  MemoryBreakdown peak_breakdown{};  // peak_bytes by category
  MemoryBreakdown held_breakdown{};  // held_bytes by category
  // What it holds at its end as the reserved estimate counts it: each event rounded to
  // segments as the simulator rounds it, the sharded state's apart from the rest. A stage
  // adds them up to what it holds (stage_memory), so that its reserved peak is the
  // simulator's for the same events, to the byte the estimate truncates (found by QA:
  // `pipeline --pp 1` rounded what the forward held as one sum and came out up to 1.05 x
  // 64 MiB under `simulate`).
  std::int64_t held_sharded_rounded_bytes = 0;
  std::int64_t held_transient_rounded_bytes = 0;
  // The rounded sizes at its reserved peak (chunk_memory's, or the state of the bound at any
  // timing, chunk_any_timing_memory's), so that
  // a stage estimates its reserved peak from the sums, as the simulator does, and not as
  // two truncated estimates added (found by QA: `pipeline --pp 1` and `sweep` put a job's
  // reserved peak 1 B under `simulate`'s, and judged it fitting at that limit).
  std::int64_t peak_reserved_sharded_rounded_bytes = 0;
  std::int64_t peak_reserved_transient_rounded_bytes = 0;
  bool operator==(const ActionMemory&) const = default;
};

// A chunk's memory on its rank, action by action (docs/parallelism.md "Memory per stage"):
// a stage's peak is the most its chunks' sharded states plus what its actions hold reach
// in the rank's order of actions (stage_memory).
struct ChunkMemory {
  std::int64_t persistent_bytes = 0;  // the sharded state (Program::persistent_bytes)
  // By the action's place in its pipeline step (chunk_action_memory picks one). A chunk
  // re-gathered per microbatch runs the whole phase in each, so its forwards are alike and
  // its backwards are alike.
  ActionMemory first_forward;   // microbatch 0: a chunk kept gathered gathers here
  ActionMemory forward;         // later microbatches
  ActionMemory first_backward;  // microbatch 0 (not the last): kept gathered, gradients allocated
  ActionMemory backward;        // neither first nor last
  ActionMemory last_backward;   // the last: kept gathered, its reduce-scatters free them
  ActionMemory optimizer;       // its optimizer step, after the rank's last action
  bool operator==(const ChunkMemory&) const = default;
};

// What one chunk (a contiguous range of units on one pipeline rank) costs per microbatch.
struct ChunkTimes {
  double first_forward_s = 0;  // microbatch 0: FSDP all-gathers exposed + forward compute
  double forward_s = 0;        // every later microbatch: forward compute only
  double backward_s = 0;       // every microbatch but the last: recompute + backward
  double last_backward_s = 0;  // the last microbatch: backward beside the reduce-scatters
  double tail_s = 0;           // after the last backward: exposed reduce-scatters, optimizer
  // What one microbatch in flight holds from its forward to its backward: its saved
  // activations and, in a chunk re-gathered per microbatch, the unsharded copies of the
  // buckets its plan keeps gathered after forward (the forward phase's net allocation).
  std::int64_t activation_bytes = 0;
  // The chunk's own single-microbatch FSDP peak (one microbatch of activations included)
  // and the unsharded gradients it holds while they accumulate across microbatches: what
  // the compositions' thresholds add up (chunk_base_reserved_bytes); a stage's peak is its
  // walk over `memory` (stage_memory).
  std::int64_t base_peak_allocated_bytes = 0;
  std::int64_t base_peak_reserved_bytes = 0;
  std::int64_t accumulated_gradient_bytes = 0;
  // Kept gathered over M > 1 microbatches: the gradients accumulate unsharded and only the
  // last microbatch of each pipeline step reduce-scatters (else every backward does). A
  // schedule file derives it from the chunk's keep_gathered and the job's microbatches.
  bool accumulates = false;
  // The optimizer's part of tail_s (the chunk's AdamW step, after every other task of the
  // one-microbatch Program). A backward that reduce-scatters (every microbatch of a chunk
  // re-gathered per microbatch, else the last of each pipeline step) makes its rank wait
  // for them: the rank's next action starts tail_s - optimizer_s after its end at the
  // earliest (reduce_scatter_wait_s).
  double optimizer_s = 0;
  // Kept gathered over M > 1 microbatches: each backward's accumulation of its gradients
  // into the unsharded ones (gradient_accumulation_op), included in backward_s and
  // last_backward_s; 0 otherwise.
  double accumulate_s = 0;
  // Its memory action by action, from its Program and the Program's simulated timeline
  // (chunk_memory). Not in schedule files (ScheduleChunk::times has it empty): a schedule's
  // stage peaks are stored, and its Programs give it again.
  ChunkMemory memory;
  bool operator==(const ChunkTimes&) const = default;
};

// The input of the schedule simulation: chunk c = v * stages + r runs on rank r
// (Megatron's interleaving; v = 0 when virtual_stages == 1).
struct PipelineSpec {
  int stages = 1;          // P
  int virtual_stages = 1;  // V
  int microbatches = 1;    // M
  // G: the schedule runs G times per optimizer step (JobSpec::pipeline_steps), microbatch
  // g M + m being microbatch m of step g. Each step is a whole pipeline: its chunks'
  // first forward and last backward are microbatches 0 and M - 1 of the step (so a rank
  // starts step g + 1 once its reduce-scatters of step g are done, as after any backward
  // that reduce-scatters); the optimizers follow the last step.
  int steps = 1;
  PipelineSchedule schedule = PipelineSchedule::k1F1B;
  std::vector<ChunkTimes> chunks;  // P * V, in model order
  double send_s = 0;  // point-to-point send of one microbatch's activation (or its gradient)
  // The send over each link, link r joining ranks r and (r + 1) mod P
  // (pipeline_link_send_seconds): a send from chunk c to c + 1 or back takes
  // link_send_s[c mod P]. Empty: send_s over every link.
  std::vector<double> link_send_s;
  // The caching allocator's inflation of transient memory (SimOptions::
  // allocator_fragmentation): of what a rank holds beyond its sharded state when a stage's
  // reserved peak is estimated (stage_memory), and in the compositions' thresholds
  // (chunk_base_reserved_bytes).
  double allocator_fragmentation = SimOptions{}.allocator_fragmentation;
  // Its segment (SimOptions::allocator_segment_bytes): a stage's reserved estimate rounds
  // the rank's sharded state to it (stage_memory); the events its actions hold are rounded
  // when the chunks' memory is built (chunk_memory, chunk_any_timing_memory), to the
  // default segment.
  std::int64_t allocator_segment_bytes = SimOptions{}.allocator_segment_bytes;
  bool operator==(const PipelineSpec&) const = default;
};

// The reserved-memory estimate of `bytes` of transient tensors: (1 + fragmentation) x
// bytes, as the simulator inflates everything but the sharded state (docs/plan-format.md
// "Reserved memory"; the 2 MiB segment rounding is left out: microbatch activations and
// gradients are many tensors the chunk's own simulation already rounded).
std::int64_t transient_reserved_bytes(std::int64_t bytes, double fragmentation);

// An upper estimate of what one chunk adds to its rank's reserved peak besides the
// activations in flight: its single-microbatch reserved peak less its one microbatch of
// activations, plus the gradients it accumulates across microbatches, both as reserved.
// Summed over a rank's chunks, plus transient_reserved_bytes of its peak activations in
// flight, it is what pipeline_compositions and the per-stage tuner's chunk budgets choose
// candidates by (additive, unlike a stage's walked peak, stage_memory, which judges them;
// before 2026-12-05 it was the stage's peak).
std::int64_t chunk_base_reserved_bytes(const ChunkTimes& times, double fragmentation);

struct PipelineAction {
  int chunk = 0;
  int microbatch = 0;
  bool backward = false;
  double start_s = 0;
  double end_s = 0;
  bool operator==(const PipelineAction&) const = default;
};

struct StageResult {
  int rank = 0;
  double busy_s = 0;          // time running forward/backward actions
  double pipeline_end_s = 0;  // its last action's end
  // Held up between actions by its own reduce-scatters (exposed communication, not
  // bubble: the bubble counts it busy).
  double held_s = 0;
  // The rank's last action's end or its chunks' last reduce-scatters, whichever is later,
  // then its chunks' optimizers one after another.
  double end_s = 0;
  int max_in_flight = 0;  // most microbatch activations held at once (all its chunks)
  std::int64_t peak_allocated_bytes = 0;
  std::int64_t peak_reserved_bytes = 0;
  std::vector<PipelineAction> actions;  // in the rank's execution order
  bool operator==(const StageResult&) const = default;
};

// A stage's peaks at any timing of its chunks' Programs (pipeline_any_timing in
// memory_bound.hpp; docs/parallelism.md "Peak memory at any timing").
struct StageAnyTiming {
  int rank = 0;
  std::int64_t peak_allocated_bytes = 0;
  std::int64_t peak_reserved_bytes = 0;
  bool operator==(const StageAnyTiming&) const = default;
};

struct PipelineResult {
  double step_time_s = 0;  // the slowest rank's end
  // 1 - (sum of busy time) / (stages * makespan of the actions): the idle share of the
  // pipeline. 1F1B with uniform stages and free sends: (P-1)/(M+P-1). A rank waiting for
  // its own reduce-scatters (reduce_scatter_wait_s) counts as busy here: exposed
  // communication, not the schedule's idle time.
  double bubble_fraction = 0;
  std::vector<StageResult> stages;
  bool operator==(const PipelineResult&) const = default;
};

// The (chunk, microbatch, backward) order a rank executes (times left 0): `steps` times
// the schedule of `microbatches`, step g's microbatches numbered from g x microbatches.
// REQUIRES: validate_pipeline passed for these numbers.
std::vector<PipelineAction> pipeline_order(int stages, int virtual_stages, int microbatches,
                                           PipelineSchedule schedule, int rank, int steps = 1);

// Throws Error(kBadInput) naming the flag: interleaved-1f1b needs microbatches its rounds
// fill (interleaved_rounds_fill) and virtual_stages >= 2; 1f1b and gpipe take
// virtual_stages == 1; microbatches >= 1. With `source` (a file's job), errors name its
// fields rather than the flags (job_where). Implemented in the core
// (src/pipeline_chunks.cpp).
void validate_pipeline(const JobSpec& job, const std::string& source = "");

// PyTorch's ScheduleInterleaved1F1B runs max(1, microbatches / pp) rounds of equal size:
// whether `microbatches` fill them (3 on pp 2 do, 5 on pp 2 do not).
// REQUIRES: pp >= 1, microbatches >= 1.
bool interleaved_rounds_fill(std::int64_t pp, std::int64_t microbatches);

PipelineResult simulate_pipeline(const PipelineSpec& spec);

// A PipelineSpec of `job`'s stages, virtual stages, microbatches, pipeline steps and
// schedule; no chunks, no sends. Implemented in the core.
PipelineSpec pipeline_spec_of(const JobSpec& job);

// The id of a chunk Program's last forward compute task (-1 without one): a pipeline
// action's forward phase is the tasks up to it, its backward phase the rest but the
// optimizer (chunk_times, plan_pipeline_replay in validate/). Implemented in the core.
int last_forward_task(const Program& program);

// What one action of a chunk runs of its one-microbatch Program and how the memory events
// of what it runs apply: the rules the executor replays (plan_pipeline_replay in
// validate/) and the stage memory prices (chunk_memory). Implemented in the core.
struct ChunkActionScope {
  bool backward = false;
  // The whole phase (forward: the tasks up to last_forward_task; backward: the rest but
  // the optimizer), else its compute tasks only: a chunk kept gathered over microbatches
  // gathers in the first forward and reduce-scatters in the last backward of each step.
  bool whole = true;
  // kGatheredParams events apply (else the parameters stay gathered as they are).
  bool gathered_params_events = true;
  // Compute tasks' kGradients allocations apply: a chunk that accumulates allocates its
  // unsharded gradients in the first backward; the last one's reduce-scatters free them.
  bool gradient_allocations = true;
  // Each backward adds its gradients into the accumulated ones.
  bool accumulate_gradients = false;
  // An accumulating chunk holds its unsharded gradients in the reduce dtype (FSDP2 casts
  // them before accumulating, FSDPParam.to_accumulated_grad_if_needed): the Program's
  // param-dtype gradient allocations (compute tasks) and their frees (the reduce-scatter
  // copy-in, or the reduce-scatter without copies) count numerator / denominator times
  // (reduce / param element bytes).
  int gradient_bytes_numerator = 1;
  int gradient_bytes_denominator = 1;
  bool operator==(const ChunkActionScope&) const = default;
};
// The action of microbatch `microbatch` (numbered across pipeline steps) of a chunk of
// `job` (its microbatches per step, dtypes) that accumulates or not (ChunkTimes::
// accumulates).
ChunkActionScope chunk_action_scope(const JobSpec& job, bool accumulates, bool backward,
                                    int microbatch);
// The ids of the tasks of `program` such an action runs, ascending.
std::vector<int> chunk_action_tasks(const Program& program, const ChunkActionScope& scope);
// What an action makes of one memory event of its Program: none, one or two events.
struct TrackedEvents {
  std::array<MemoryEvent, 2> events{};
  int count = 0;
  // `event` as it is.
  static TrackedEvents one(const MemoryEvent& event) { return {{event}, 1}; }
  const MemoryEvent* begin() const { return events.data(); }
  const MemoryEvent* end() const { return events.data() + count; }
  bool operator==(const TrackedEvents&) const = default;
};

// How the actions of one Program track its memory events: as they are, scaled to the
// reduce dtype, not at all, or (the unsharded gradients a backward of an accumulating
// chunk makes after its first) as a transient: allocated where the Program allocates them,
// in the param dtype, and freed when the task ends, FSDP2's post-backward having added
// them into the accumulated ones (FSDPParam.accumulate_unsharded_grad_if_needed).
class ChunkActionEvents {
 public:
  explicit ChunkActionEvents(const Program& program);
  // `event` of `task` as the action tracks it, each applied at its own `at_end`.
  TrackedEvents operator()(const ChunkActionScope& scope, const Task& task,
                           const MemoryEvent& event) const;

 private:
  const Program* program_;
  std::vector<bool> has_copy_in_;  // per bucket
};

// A chunk's ChunkMemory with each kind of action's ActionMemory from `action_memory`, given
// the action's scope and its tasks (chunk_action_tasks), and the optimizer's from it given
// no scope (every event as it is) and the optimizer tasks: chunk_memory's and the bound at
// any timing's (memory_bound.hpp) assembly. Implemented in the core.
ChunkMemory chunk_memory_with(
    const JobSpec& job, const Program& program, bool accumulates,
    const std::function<ActionMemory(const ChunkActionScope* scope, const std::vector<int>& tasks)>&
        action_memory);

// The ChunkMemory entry of an action (a backward both first and last of its step, M = 1,
// is the last). Implemented in the core.
const ActionMemory& chunk_action_memory(const ChunkMemory& memory, bool backward, int microbatch,
                                        int microbatches);

// A stage's memory over its rank's actions in their order: its chunks' sharded states,
// plus what each action holds and, while it runs, its peak; after the last action each
// chunk's optimizer (in chunk order). Pure arithmetic on the chunks' ChunkMemory (the
// chunks of `spec` on rank `rank`). Implemented in the core.
struct StageMemory {
  std::int64_t peak_allocated_bytes = 0;
  // The simulator's reserved estimate, at its highest: what the rank holds (its sharded
  // state rounded to segments once, every other event it holds rounded as allocated) plus
  // the running action's own.
  std::int64_t peak_reserved_bytes = 0;
  MemoryBreakdown peak_breakdown{};  // peak_allocated_bytes by category
  std::int64_t start_bytes = 0;      // allocated before the first action
  // Per action (in `actions` order): its peak and what is allocated at its end, bytes.
  std::vector<std::int64_t> action_peak_bytes;
  std::vector<std::int64_t> action_end_bytes;
  // The most while the chunks' optimizers run, and what is allocated after them.
  std::int64_t optimizer_peak_bytes = 0;
  std::int64_t end_bytes = 0;
  bool operator==(const StageMemory&) const = default;
};
StageMemory stage_memory(const PipelineSpec& spec, int rank,
                         const std::vector<PipelineAction>& actions);

// Whether a chunk's backward of microbatch `m` (numbered across pipeline steps, M per
// step) reduce-scatters: every one, or the last of each step where the chunk accumulates.
inline bool backward_reduce_scatters(const ChunkTimes& times, int m, int microbatches) {
  return !times.accumulates || m % microbatches == microbatches - 1;
}

// How long after such a backward's end its rank waits before its next action: the rest of
// the chunk's tail but the optimizer, its exposed reduce-scatters. FSDP2's post-backward
// callback makes the compute stream wait for the last reduce-scatter whenever the backward
// is the last (is_last_backward: by default every backward of torchtitan's gradient
// accumulation; under PP the one that syncs the gradients), and the next forward's
// all-gather streams wait for the compute stream (root pre-forward); SimpleFSDP's compiled
// backward returns the reduced gradients. So the next action, gathers included, starts
// after them (docs/parallelism.md "A backward's reduce-scatters end before the next
// action").
inline double reduce_scatter_wait_s(const ChunkTimes& times) {
  return std::max(0.0, times.tail_s - times.optimizer_s);
}

// How many of `layers` transformer blocks each of the pp * virtual_stages chunks holds,
// as torchtitan's generate_llm_fqn_per_model_part splits them: the embedding (with the
// first chunk) counts as job.pp_first_stage_less_layers blocks and norm+output (with the
// last) as pp_last_stage_less_layers; the blocks plus those split as evenly as possible,
// the earlier chunks taking the remainder. With 0 and 0 the blocks alone split evenly
// (Megatron's split). A first or last chunk may hold no block. One chunk holds all.
// REQUIRES: a job normalize_job accepts for a model of `layers` blocks.
std::vector<std::int64_t> pipeline_chunk_blocks(const JobSpec& job, std::int64_t layers);

// The largest embedding/output weight `sweep` and `tune` try (--try-pp-splits N):
// (N + 1)^2 pairs at most.
inline constexpr std::int64_t kMaxTriedSplitWeight = 4;

// `job` (normalized, more than one chunk), then the same job with each pair of weights
// (pp_first/last_stage_less_layers) in 0..max_weight, first weight outer, that
// normalize_job accepts and that splits the blocks into other chunks than every pair
// before it (pipeline_chunk_blocks): each distinct split once.
// REQUIRES: 0 <= max_weight <= kMaxTriedSplitWeight.
std::vector<JobSpec> pipeline_split_jobs(const ModelSpec& model, const JobSpec& job,
                                         std::int64_t max_weight);

// The units of each chunk (pp * virtual_stages chunks): the embedding with the first
// chunk, norm+output with the last, pipeline_chunk_blocks blocks each.
// REQUIRES: normalized job. (This and chunk_workload are pure workload functions:
// implemented in the core, src/pipeline_chunks.cpp, so that the schedule reader can check
// a pipeline schedule.)
std::vector<std::vector<int>> pipeline_chunks(const Workload& workload);

// A chunk's units as stage tables print them: "tok_embeddings..layers.3", or the one
// unit's name ("norm+output"). REQUIRES: `units` non-empty indices of `workload`.
std::string unit_range(const Workload& workload, const std::vector<int>& units);

// The units of the chunks pipeline rank `rank` runs (c = rank, rank + pp, ...; `chunks` in
// pipeline_chunks order), "tok_embeddings..layers.3, layers.16..layers.19".
std::string rank_units(const Workload& workload, const std::vector<std::vector<int>>& chunks,
                       int rank);

// One chunk as a workload of its own: its units re-indexed from 0, the AdamW step over its
// shards.
// REQUIRES: a unit's shared parameter units are in `units` (normalize_job refuses tied
// embeddings under PP).
Workload chunk_workload(const Workload& workload, const std::vector<int>& units);

// Is this job simulated as a pipeline (per-chunk programs composed over microbatches)?
// pp > 1, or gradient accumulation over microbatches > 1. Implemented in the core.
bool is_pipelined(const JobSpec& job);

// The default choice of simulate_pipelined_job (the fsdp2 plan's): parameters stay
// gathered across microbatches under PP (torchtitan's reshard_after_forward=False, the
// pipeline schedule syncing gradients in the last microbatch only); without PP the
// microbatches are torchtitan's gradient accumulation, a plain loop in which FSDP2
// gathers and reduce-scatters every microbatch, so they re-gather.
bool default_keep_gathered(const JobSpec& job);

// A chunk's plan as it runs kept gathered across microbatches or not. Kept: no bucket is
// resharded after forward and, under PP, its reduce-scatters follow its last backward
// compute (Plan::reduce_after_backward: PyTorch's PipelineStage runs every backward of an
// FSDP stage with gradient sync off and reduces after the last one). Re-gathered: the
// plan's own resharding, each reduce-scatter after the compute that made its gradients.
void set_keep_gathered(Plan& plan, const JobSpec& job, bool keep_gathered);

// Does a chunk of `job` kept gathered (or not) hold its unsharded gradients with sync off
// until its step's last backward (ChunkTimes::accumulates)? Kept gathered over several
// microbatches, or under PP with one (PipelineStage turns gradient sync off in every
// backward: FSDP2's post-backward casts each gradient to the reduce dtype and keeps it).
bool chunk_accumulates(const JobSpec& job, bool keep_gathered);

// Which ways of running a chunk across microbatches a tuner may choose (TunerOptions::
// keep_gathered; `tune` / `sweep --keep-gathered any|yes|no|torchtitan`).
enum class KeepGatheredChoice {
  kAny,         // kept gathered or re-gathered per microbatch: the tuner picks
  kKept,        // kept gathered only (FSDP2 without gradient sync until the last microbatch)
  kRegathered,  // gathered and reduce-scattered in every microbatch only
  kTorchtitan,  // what torchtitan runs unchanged: default_keep_gathered(job)
};
std::string to_string(KeepGatheredChoice choice);  // "any", "yes", "no", "torchtitan"
// The keep_gathered values `choice` allows for the chunks of `job`: re-gathering first;
// only default_keep_gathered(job) when the job is not pipelined.
std::vector<bool> allowed_keep_gathered(KeepGatheredChoice choice, const JobSpec& job);
// The fsdp2 baseline's choice under `choice`: default_keep_gathered(job) where allowed,
// else the one value allowed.
bool baseline_keep_gathered(KeepGatheredChoice choice, const JobSpec& job);

// What one microbatch of a chunk costs, from its simulated single-microbatch Program
// (`result` with timings). keep_gathered: the first forward carries the all-gathers, later
// forwards and all but the last backward are compute (+ TP) only, unsharded gradients
// accumulate; otherwise every microbatch runs the whole Program (gathers, and
// reduce-scatters into the sharded gradients) and nothing accumulates.
ChunkTimes chunk_times(const Workload& chunk, const Program& program, const SimResult& result,
                       bool keep_gathered, const CostModel& costs);
// The same with the units' compute costs already known (compute_costs(chunk, costs), e.g.
// a Lowerer's): no cost query. REQUIRES: `compute` of this chunk.
ChunkTimes chunk_times(const Workload& chunk, const Program& program, const SimResult& result,
                       bool keep_gathered, const ComputeCosts& compute);

// A chunk's ChunkMemory from its one-microbatch Program and that Program's simulated
// timeline (`timings`: simulate with record_timings): each kind of action's events (the
// scope chunk_action_scope gives a chunk of `job` that accumulates or not) in the order
// their tasks start and end there, the optimizer's last; reserved as `options` estimate it.
ChunkMemory chunk_memory(const JobSpec& job, const Program& program,
                         const std::vector<TaskTiming>& timings, bool accumulates,
                         const SimOptions& options = {});

// The rank's peak of activations in flight, bytes, from its action order alone (chunk c
// holds activation_bytes[c] per microbatch between its forward and its backward).
std::int64_t peak_in_flight_bytes(int stages, int virtual_stages, int microbatches,
                                  PipelineSchedule schedule, int rank,
                                  const std::vector<std::int64_t>& activation_bytes);

// Builds the FSDP plan of one chunk (e.g. fsdp2_plan, or a tuner's result).
using ChunkPlanner = std::function<Plan(const Workload& chunk)>;

struct PipelineSimulation {
  std::vector<std::vector<int>> chunk_units;  // unit indices in the job's workload
  std::vector<Workload> chunk_workloads;
  // As simulated: reshard_after_forward forced off where the chunk keeps its parameters
  // gathered across microbatches.
  std::vector<Plan> chunk_plans;
  std::vector<bool> chunk_keep_gathered;
  std::vector<Program> chunk_programs;  // lowered on chunk_workloads
  std::vector<SimResult> chunk_results;
  PipelineSpec spec;
  PipelineResult result;
  double tokens_per_s_per_gpu = 0;  // b*s*M tokens per DP rank / (tp * pp) per step
  double mfu = 0;
  bool operator==(const PipelineSimulation&) const = default;
};

// Every chunk's FSDP Program lowered and simulated for one microbatch, then the schedule.
// Works for pp == 1 too (one chunk, M microbatches of gradient accumulation).
// REQUIRES: validate_pipeline(workload.job) passed.
PipelineSimulation simulate_pipelined_job(const Workload& workload, const CostModel& costs,
                                          const ChunkPlanner& planner,
                                          const SimOptions& options = {});

// The same with one plan and keep-gathered choice per chunk (pipeline_chunks order).
// REQUIRES: plans.size() == keep_gathered.size() == number of chunks.
PipelineSimulation simulate_pipelined_plans(const Workload& workload, const CostModel& costs,
                                            const std::vector<Plan>& plans,
                                            const std::vector<bool>& keep_gathered,
                                            const SimOptions& options = {});

// The same from Programs already lowered (a schedule file's, replayed as stored): each
// plan is kept as given, each program simulated as it is.
PipelineSimulation simulate_pipelined_programs(const Workload& workload, const CostModel& costs,
                                               std::vector<Plan> plans,
                                               std::vector<Program> programs,
                                               const std::vector<bool>& keep_gathered,
                                               const SimOptions& options = {});
// The same with the chunk workloads already built (chunk_workload of each of
// pipeline_chunks(workload)) and, when not null, their compute costs (compute_costs of
// each, e.g. a Lowerer's): what the per-stage tuner has at hand.
PipelineSimulation simulate_pipelined_programs(const Workload& workload,
                                               std::vector<Workload> chunk_workloads,
                                               const std::vector<ComputeCosts>* chunk_compute,
                                               const CostModel& costs, std::vector<Plan> plans,
                                               std::vector<Program> programs,
                                               const std::vector<bool>& keep_gathered,
                                               const SimOptions& options = {});

// The point-to-point send of one microbatch's activation between stages, and the whole
// job's tokens/s/GPU and MFU at `sim.result.step_time_s`: what simulate_pipelined_* fill
// in after the chunks (for callers that compose a PipelineSpec themselves, e.g. the sweep).
// `tokens_per_step` and `model_flops_per_step` are the whole job's per DP rank
// (Workload::tokens_per_step, Workload::model_flops_per_step).
// The send over each link (pipeline_link_groups), and the slowest link's (the `send_s`
// that schedules and reports quote; 0 for one stage, which sends nothing).
std::vector<double> pipeline_link_send_seconds(const Workload& workload, const CostModel& costs);
double pipeline_send_seconds(const Workload& workload, const CostModel& costs);
// Sets spec.link_send_s and spec.send_s (the slowest link's) for `workload`.
void set_pipeline_sends(const Workload& workload, const CostModel& costs, PipelineSpec& spec);
// The bytes of that send (what send_s is priced from and the executor sends): one
// microbatch's activation of b*s/tp tokens (sequence parallelism: each TP rank holds its
// part) of `dim` in the activation dtype (the job's param dtype). Implemented in the core.
std::int64_t pipeline_send_bytes(const Workload& workload);
void fill_pipeline_throughput(const JobSpec& job, double tokens_per_step,
                              double model_flops_per_step, const HardwareSpec& hardware,
                              PipelineSimulation& sim);

// Does a stage's reserved peak fit under the limit? (as plan_fits, tuner.hpp)
bool stage_fits(const StageResult& stage, std::int64_t memory_limit_bytes);
// Does every stage fit?
bool pipeline_fits(const PipelineResult& result, std::int64_t memory_limit_bytes);

// The largest stage allocated peak, bytes (the Pareto fronts' memory axis).
std::int64_t largest_stage_peak_bytes(const PipelineResult& result);
// The largest stage reserved peak, bytes (what pipeline_fits compares with the limit).
std::int64_t largest_stage_reserved_bytes(const PipelineResult& result);

// Point-to-point groups of the pipeline's links, link r joining pipeline ranks r and
// (r + 1) mod pp (the last closes the interleaved loop; pp 2 has the one pair twice): pp is
// the outermost mesh dimension (torchtitan), so adjacent stages are dp_replicate *
// dp_shard * tp ranks apart, and a link is within a node only when every pair of its
// ranks is (with stages narrower than a node some links cross a node boundary and others
// not: 16 GPUs of 8 per node as pp 4 x 4 cross between stages 1 and 2 and 3 and 0).
std::vector<CommGroup> pipeline_link_groups(const JobSpec& job);

}  // namespace fsdptune
