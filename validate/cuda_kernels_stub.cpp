// The cuda op kernels in a build without CUDA (STYLE.md rule 2): no devices, and asking
// for the kernels says how to get them.
#include "fsdptune/error.hpp"
#include "fsdptune/kernels.hpp"

namespace fsdptune {

std::unique_ptr<OpKernels> make_cuda_kernels(const KernelOptions& /*options*/) {
  throw_runtime("cuda", "fsdptune was built without CUDA",
                "rebuild with the CUDA toolkit (cuBLAS, NCCL) and -DFSDPTUNE_CUDA=ON");
}

int cuda_device_count() { return 0; }

AttentionOutputs run_cuda_attention(const AttentionShape& /*shape*/, AttentionKernel /*attention*/,
                                    const std::vector<float>& /*q*/,
                                    const std::vector<float>& /*k*/,
                                    const std::vector<float>& /*v*/,
                                    const std::vector<float>& /*d_o*/) {
  make_cuda_kernels();  // throws: built without CUDA
  return {};
}

}  // namespace fsdptune
