// The cuda backend in a build without CUDA (STYLE.md rule 2).
#include "fsdptune/backend.hpp"
#include "fsdptune/error.hpp"

namespace fsdptune {

std::unique_ptr<Backend> make_cuda_backend(int /*local_rank*/, AttentionKernel /*attention*/) {
  throw_runtime("--backend cuda", "fsdptune was built without CUDA",
                "rebuild with the CUDA toolkit (cuBLAS, NCCL) and -DFSDPTUNE_CUDA=ON, or use "
                "--backend cpu");
}

int cuda_backend_device_count() { return 0; }

}  // namespace fsdptune
