// Shared helpers of the CUDA back end: error checks that throw (never
// abort), an RAII device buffer and CUDA-event timing.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <stdexcept>
#include <string>
#include <utility>

#include "cuda/cuda_api.h"

namespace medretrieve::cuda::detail {

inline void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free error state for the next call
    throw std::runtime_error(std::string("CUDA error in ") + what + ": " + cudaGetErrorString(err));
  }
}
#define MR_CUDA_CHECK(expr) ::medretrieve::cuda::detail::check((expr), #expr)
#define MR_CUDA_LAUNCHED(name) ::medretrieve::cuda::detail::check(cudaGetLastError(), name)

// Throws std::runtime_error("CUDA is not available: ...") unless a device can run.
void require_device();

template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t count) { resize(count); }
  ~DeviceBuffer() {
    if (ptr_) cudaFree(ptr_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void resize(size_t count) {
    if (ptr_) cudaFree(ptr_);
    ptr_ = nullptr;
    count_ = count;
    if (count) MR_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&ptr_), count * sizeof(T)));
  }
  void upload(const T* host, size_t count) {
    resize(count);
    if (count) MR_CUDA_CHECK(cudaMemcpy(ptr_, host, count * sizeof(T), cudaMemcpyHostToDevice));
  }
  void download(T* host, size_t count) const {
    if (count) MR_CUDA_CHECK(cudaMemcpy(host, ptr_, count * sizeof(T), cudaMemcpyDeviceToHost));
  }
  T* get() const { return ptr_; }
  size_t size() const { return count_; }

 private:
  T* ptr_ = nullptr;
  size_t count_ = 0;
};

// Runs `launch` (kernels only, data already on the device) timing->warmup
// times, then timing->repeats times between CUDA events.
template <class Launch>
void time_kernels(Timing* timing, Launch&& launch) {
  if (!timing || timing->repeats <= 0) return;
  for (int i = 0; i < timing->warmup; ++i) launch();
  MR_CUDA_CHECK(cudaDeviceSynchronize());
  cudaEvent_t start, stop;
  MR_CUDA_CHECK(cudaEventCreate(&start));
  MR_CUDA_CHECK(cudaEventCreate(&stop));
  try {
    for (int i = 0; i < timing->repeats; ++i) {
      MR_CUDA_CHECK(cudaEventRecord(start));
      launch();
      MR_CUDA_CHECK(cudaEventRecord(stop));
      MR_CUDA_CHECK(cudaEventSynchronize(stop));
      float ms = 0.f;
      MR_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
      timing->times_ms.push_back(ms);
    }
  } catch (...) {
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    throw;
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
}

inline unsigned blocks_for(size_t n, unsigned threads) { return unsigned((n + threads - 1) / threads); }

}  // namespace medretrieve::cuda::detail
