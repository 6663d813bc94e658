// Hardware specs: the figures the analytic cost model is built from
// (profiles/*.json, sources in docs/hardware.md).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace fsdptune {

inline constexpr int kHardwareFormatVersion = 1;

struct HardwareSpec {
  std::string id;                    // "h100-sxm"
  std::string name;                  // "NVIDIA H100 SXM 80GB"
  double peak_bf16_flops_per_s = 0;  // dense
  double peak_fp8_flops_per_s = 0;   // dense; 0 when unsupported
  double peak_fp32_flops_per_s = 0;  // non-tensor-core fp32
  std::int64_t hbm_bytes = 0;
  double hbm_bytes_per_s = 0;
  std::int64_t sm_count = 0;
  std::int64_t gpus_per_node = 8;
  double nvlink_bytes_per_s = 0;        // per GPU per direction
  double nvlink_busbw_bytes_per_s = 0;  // achievable AG/RS bus bandwidth inside a node
  // Achievable all-reduce bus bandwidth inside a node; higher than AG/RS where the switch
  // reduces in-network (NVLS on NVSwitch gen 3). 0 = same as nvlink_busbw_bytes_per_s.
  double nvlink_allreduce_busbw_bytes_per_s = 0;
  double network_bytes_per_s = 0;  // achievable per GPU (one NIC per GPU)
  // Cross-node bus bandwidth lost to scale: the AG/RS/AR bandwidth of a group spanning
  // m > 4 nodes is multiplied by this once per doubling of m beyond 4 (docs/hardware.md:
  // fabric congestion and the longer rings measured at 32-128 nodes). 1 = none.
  double network_efficiency_per_node_doubling = 1.0;
  double collective_base_latency_s = 0;  // per collective launch
  double nvlink_hop_latency_s = 0;       // per ring step inside a node
  double network_hop_latency_s = 0;      // per ring step across nodes
  // Bandwidth ramp of collectives (docs/hardware.md): a ring step moving `b` bytes per rank
  // reaches busbw * (1 - exp(-(b / busbw_ramp_step_bytes)^busbw_ramp_exponent)).
  double busbw_ramp_step_bytes = 2097152;
  double busbw_ramp_exponent = 0.375;
  double gemm_efficiency_ceiling = 0.8;  // best GEMM rate / dense peak, before quantization
  double memory_bound_efficiency = 0.8;  // achieved / peak HBM bandwidth
  double attention_efficiency = 0.55;    // flash attention forward / dense peak, large shapes
  // Flash attention backward / dense peak (FLOPs counted as 2.5x the forward's); 0 = the
  // same as attention_efficiency.
  double attention_backward_efficiency = 0;
  double kernel_launch_s = 4e-6;
  std::int64_t memory_reserve_bytes = 0;  // kept free for CUDA context, NCCL, fragmentation

  bool operator==(const HardwareSpec&) const = default;
};

// Whether `a` and `b` price alike: every field but the free-text name equal (a schedule's
// spec and a --hardware file; found by QA: a copy renamed was refused as another spec).
bool same_figures(const HardwareSpec& a, const HardwareSpec& b);

// The fields in which `theirs` and `ours` differ, by name ("peak_bf16_flops_per_s
// 989000000000000 (here: 2e+15), ..."), name excepted; "(no field differs)" when none.
std::string figure_differences(const HardwareSpec& theirs, const HardwareSpec& ours);

// Reads a hardware spec ("format": "fsdptune-hardware", "version": 1). Fields with a
// default above may be omitted; unknown fields, missing required ones, negative or
// non-numeric values throw Error(kBadInput) naming `source` and the field.
HardwareSpec hardware_from_json(const nlohmann::json& json, const std::string& source);
nlohmann::json hardware_to_json(const HardwareSpec& spec);

// Built-in specs, compiled in from profiles/{h100-sxm,h200,a100-80g}.json.
std::vector<std::string> builtin_hardware_names();
// Whether `id` is one of builtin_hardware_names().
bool is_builtin_hardware(const std::string& id);
// Throws Error(kBadInput) listing the built-ins.
HardwareSpec builtin_hardware(const std::string& id);

}  // namespace fsdptune
