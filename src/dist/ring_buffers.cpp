// The buffers a rank holds during ring attention: CPU vectors, or CUDA scratch memory ordered on
// the call's stream (so a call queues its work and returns, as attention_forward does).
#include "core/validate.hpp"
#include "dist/ring_plan.hpp"
#include "flashkit/error.hpp"
#if FLASHKIT_HAVE_CUDA
#include "cuda/ring_ops.hpp"
#endif

namespace flashkit::dist {

namespace {

std::int64_t elements(std::initializer_list<std::int64_t> shape) {
  std::int64_t n = 1;
  for (std::int64_t s : shape) n *= s;
  return n;
}

}  // namespace

RingBuffer::RingBuffer(const Device& device, void* stream, DType dtype,
                       std::initializer_list<std::int64_t> shape)
    : stream_(stream) {
  const std::size_t bytes = std::size_t(elements(shape)) * dtype_size(dtype);
  void* data = nullptr;
  if (device.is_cpu()) {
    host_.assign((bytes + 7) / 8, 0);
    data = host_.data();
  } else {
#if FLASHKIT_HAVE_CUDA
    device_data_ = cuda::ring_alloc(bytes, stream);
    data = device_data_;
#else
    core::fail("q.device", "cpu (this build has no CUDA backend)", device.str());
#endif
  }
  view_ = Tensor(data, dtype, shape, device);
}

RingBuffer::~RingBuffer() {
  release();
}

RingBuffer::RingBuffer(RingBuffer&& other) noexcept
    : host_(std::move(other.host_)),  // the heap block moves, so the view stays valid
      device_data_(other.device_data_),
      stream_(other.stream_),
      view_(other.view_) {
  other.device_data_ = nullptr;
}

RingBuffer& RingBuffer::operator=(RingBuffer&& other) noexcept {
  if (this != &other) {
    release();
    host_ = std::move(other.host_);
    device_data_ = other.device_data_;
    stream_ = other.stream_;
    view_ = other.view_;
    other.device_data_ = nullptr;
  }
  return *this;
}

void RingBuffer::release() {
#if FLASHKIT_HAVE_CUDA
  if (device_data_ != nullptr) cuda::ring_free(device_data_, stream_);
#endif
  device_data_ = nullptr;
}

}  // namespace flashkit::dist
