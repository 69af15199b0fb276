// CudaSampling on the CUDA runtime (interface and why: sampling_device.h).
//
// Transfers are packed: one host-to-device copy carries the row parameters and every row's penalty
// table, one device-to-host copy brings back ids, logits, raw logits and stats, both through pinned
// staging buffers. Buffers are sized at construction for the largest launch; only the penalty table
// can outgrow its buffer (a long repeat_last_n = -1 history), and then it grows geometrically.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/kernels/ops.h"
#include "backends/cuda/kernels/sampling.h"
#include "backends/cuda/kernels/sampling_device.h"
#include "gpu_accel/error.h"

namespace ga::cuda {
namespace {

size_t align16(size_t v) { return (v + 15) & ~size_t{15}; }

class DeviceSampling final : public CudaSampling {
 public:
  DeviceSampling(int device, int64_t max_rows, int64_t n_vocab, int32_t max_k, void* stream)
      : device_(device), max_rows_(max_rows), n_vocab_(n_vocab), max_k_(max_k),
        stream_(static_cast<cudaStream_t>(stream)) {
    GA_CHECK(max_rows >= 1 && max_rows <= 65535, InvalidArgument, "GPU sampling: max_rows = ", max_rows,
             " is outside [1, 65535]");
    GA_CHECK(n_vocab >= 1 && n_vocab <= kSamplingMaxVocab, InvalidArgument, "GPU sampling: n_vocab = ", n_vocab,
             " is outside [1, ", kSamplingMaxVocab, "]");
    GA_CHECK(max_k >= 1 && max_k <= kSamplingMaxCandidates && max_k <= n_vocab, InvalidArgument,
             "GPU sampling: max_k = ", max_k, " is outside [1, min(n_vocab, ", kSamplingMaxCandidates, ")]");
    GA_CUDA_CHECK(cudaSetDevice(device_));
    workspace_bytes_ = sampling_workspace_bytes(max_rows, n_vocab, max_k);
    out_bytes_ = output_bytes(max_rows, max_k);
    try {
      GA_CUDA_CHECK(cudaMalloc(&workspace_, workspace_bytes_));
      GA_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&out_device_), out_bytes_));
      GA_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&out_host_), out_bytes_));
      grow_inputs(static_cast<size_t>(max_rows) * 64);
    } catch (...) {
      release();
      throw;
    }
  }
  ~DeviceSampling() override { release(); }

  void select(const float* logits, int64_t ld, std::span<const SamplingRowRequest> rows, int32_t k,
              std::vector<SamplingRowCandidates>& out) override {
    const int64_t n_rows = static_cast<int64_t>(rows.size());
    GA_CHECK(n_rows >= 1 && n_rows <= max_rows_, InvalidArgument, "GPU sampling: ", n_rows,
             " rows for a buffer of ", max_rows_);
    GA_CHECK(k >= 1 && k <= max_k_, InvalidArgument, "GPU sampling: k = ", k, " is outside [1, ", max_k_, "]");
    size_t n_penalties = 0;
    for (const auto& r : rows) n_penalties += r.penalties.size();
    GA_CHECK(n_penalties < 0x7fffffffu, InvalidArgument, "GPU sampling: penalty table of ", n_penalties, " entries");
    GA_CUDA_CHECK(cudaSetDevice(device_));
    grow_inputs(n_penalties);

    // Pack [rows][penalty ids][penalty counts] into the pinned staging buffer.
    const size_t rows_bytes = align16(static_cast<size_t>(n_rows) * sizeof(SamplingRowParams));
    auto* row_params = reinterpret_cast<SamplingRowParams*>(in_host_);
    auto* ids = reinterpret_cast<int32_t*>(in_host_ + rows_bytes);
    int32_t* counts = ids + n_penalties;
    int32_t begin = 0;
    for (int64_t r = 0; r < n_rows; ++r) {
      const SamplingRowRequest& req = rows[static_cast<size_t>(r)];
      SamplingRowParams rp;
      rp.temperature = req.temperature;
      rp.repeat_penalty = req.repeat_penalty;
      rp.frequency_penalty = req.frequency_penalty;
      rp.presence_penalty = req.presence_penalty;
      rp.penalty_begin = begin;
      rp.penalty_count = static_cast<int32_t>(req.penalties.size());
      rp.raw_stats = req.raw_stats ? 1 : 0;
      row_params[r] = rp;
      for (const auto& [id, count] : req.penalties) {
        GA_CHECK(id >= 0 && id < n_vocab_, InvalidArgument, "GPU sampling: penalty token ", id,
                 " is outside the vocabulary of ", n_vocab_);
        ids[begin] = id;
        counts[begin] = count;
        ++begin;
      }
    }
    const size_t in_bytes = rows_bytes + 2 * n_penalties * sizeof(int32_t);
    GA_CUDA_CHECK(cudaMemcpyAsync(in_device_, in_host_, in_bytes, cudaMemcpyHostToDevice, stream_));

    const size_t nk = static_cast<size_t>(n_rows) * static_cast<size_t>(k);
    SamplingSelectParams p;
    p.logits = logits;
    p.n_rows = n_rows;
    p.n_vocab = n_vocab_;
    p.ld = ld;
    p.rows = reinterpret_cast<const SamplingRowParams*>(in_device_);
    p.penalty_ids = reinterpret_cast<const int32_t*>(in_device_ + rows_bytes);
    p.penalty_counts = p.penalty_ids + n_penalties;
    p.k = k;
    p.workspace = workspace_;
    p.workspace_bytes = workspace_bytes_;
    p.out_ids = reinterpret_cast<int32_t*>(out_device_);
    p.out_logits = reinterpret_cast<float*>(out_device_ + nk * 4);
    p.out_raw_logits = reinterpret_cast<float*>(out_device_ + nk * 8);
    p.out_stats = reinterpret_cast<SamplingRowStats*>(out_device_ + align16(nk * 12));
    if (const char* why = sampling_select_unsupported_reason(p)) GA_THROW(InvalidArgument, "GPU sampling: ", why);
    GA_CUDA_CHECK(sampling_select(p, stream_));
    const size_t bytes = output_bytes(n_rows, k);
    GA_CUDA_CHECK(cudaMemcpyAsync(out_host_, out_device_, bytes, cudaMemcpyDeviceToHost, stream_));
    GA_CUDA_CHECK(cudaStreamSynchronize(stream_));

    out.resize(static_cast<size_t>(n_rows));
    const auto* h_ids = reinterpret_cast<const int32_t*>(out_host_);
    const auto* h_logits = reinterpret_cast<const float*>(out_host_ + nk * 4);
    const auto* h_raw = reinterpret_cast<const float*>(out_host_ + nk * 8);
    const auto* h_stats = reinterpret_cast<const SamplingRowStats*>(out_host_ + align16(nk * 12));
    for (int64_t r = 0; r < n_rows; ++r) {
      SamplingRowCandidates& c = out[static_cast<size_t>(r)];
      const size_t off = static_cast<size_t>(r) * static_cast<size_t>(k);
      c.ids.assign(h_ids + off, h_ids + off + k);
      c.logits.assign(h_logits + off, h_logits + off + k);
      c.raw_logits.assign(h_raw + off, h_raw + off + k);
      const SamplingRowStats& s = h_stats[r];
      c.max = s.max;
      c.raw_max = s.raw_max;
      c.nan = s.nan != 0;
      c.sum_exp = s.sum_exp;
      c.sum_exp_temp = s.sum_exp_temp;
      c.raw_sum_exp = s.raw_sum_exp;
    }
  }

  void argmax(const float* logits, int64_t ld, int64_t n_rows, std::vector<SamplingRowArgmax>& out) override {
    GA_CHECK(n_rows >= 1 && n_rows <= max_rows_, InvalidArgument, "GPU argmax: ", n_rows, " rows for a buffer of ",
             max_rows_);
    GA_CUDA_CHECK(cudaSetDevice(device_));
    // [ids][max][nan] of n_rows each, in the output buffer (output_bytes(max_rows, max_k) >= 12 bytes per row).
    const size_t rows = static_cast<size_t>(n_rows);
    ArgmaxParams p;
    p.x = logits;
    p.n_rows = n_rows;
    p.n = n_vocab_;
    p.ldx = ld;
    p.out = reinterpret_cast<int32_t*>(out_device_);
    p.out_max = reinterpret_cast<float*>(out_device_ + rows * 4);
    p.out_nan = reinterpret_cast<int32_t*>(out_device_ + rows * 8);
    if (const char* why = argmax_unsupported_reason(p)) GA_THROW(InvalidArgument, "GPU argmax: ", why);
    GA_CUDA_CHECK(cuda::argmax(p, stream_));
    GA_CUDA_CHECK(cudaMemcpyAsync(out_host_, out_device_, rows * 12, cudaMemcpyDeviceToHost, stream_));
    GA_CUDA_CHECK(cudaStreamSynchronize(stream_));
    const auto* ids = reinterpret_cast<const int32_t*>(out_host_);
    const auto* maxes = reinterpret_cast<const float*>(out_host_ + rows * 4);
    const auto* nans = reinterpret_cast<const int32_t*>(out_host_ + rows * 8);
    out.resize(rows);
    for (size_t r = 0; r < rows; ++r) out[r] = SamplingRowArgmax{ids[r], maxes[r], nans[r] != 0};
  }

  void copy_row(const float* logits, int64_t ld, int64_t row, std::span<float> host) override {
    GA_CHECK(static_cast<int64_t>(host.size()) == n_vocab_, InvalidArgument, "GPU sampling: copy_row into ",
             host.size(), " floats, n_vocab is ", n_vocab_);
    GA_CUDA_CHECK(cudaSetDevice(device_));
    GA_CUDA_CHECK(cudaMemcpyAsync(host.data(), logits + row * ld, host.size() * sizeof(float),
                                  cudaMemcpyDeviceToHost, stream_));
    GA_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

  int64_t n_vocab() const override { return n_vocab_; }
  int64_t max_rows() const override { return max_rows_; }
  int32_t max_k() const override { return max_k_; }
  double sum_rel_error() const override { return 4.0 * static_cast<double>(n_vocab_) * 0x1.0p-53; }

 private:
  static size_t output_bytes(int64_t n_rows, int32_t k) {
    return align16(static_cast<size_t>(n_rows) * static_cast<size_t>(k) * 12) +
           static_cast<size_t>(n_rows) * sizeof(SamplingRowStats);
  }

  // Input staging for max_rows_ row parameters and n_penalties table entries.
  void grow_inputs(size_t n_penalties) {
    const size_t need = align16(static_cast<size_t>(max_rows_) * sizeof(SamplingRowParams)) +
                        2 * n_penalties * sizeof(int32_t);
    if (need <= in_bytes_) return;
    const size_t bytes = std::max(need, in_bytes_ * 2);
    if (in_device_ != nullptr) {
      GA_CUDA_CHECK(cudaStreamSynchronize(stream_));  // the previous launch may still read them
      (void)cudaFree(in_device_);
      (void)cudaFreeHost(in_host_);
      in_device_ = nullptr;
      in_host_ = nullptr;
      in_bytes_ = 0;
    }
    GA_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&in_device_), bytes));
    GA_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&in_host_), bytes));
    in_bytes_ = bytes;
  }

  void release() noexcept {
    (void)cudaFree(workspace_);
    (void)cudaFree(out_device_);
    (void)cudaFree(in_device_);
    (void)cudaFreeHost(out_host_);
    (void)cudaFreeHost(in_host_);
    workspace_ = nullptr;
    out_device_ = in_device_ = nullptr;
    out_host_ = in_host_ = nullptr;
  }

  int device_;
  int64_t max_rows_;
  int64_t n_vocab_;
  int32_t max_k_;
  cudaStream_t stream_;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  unsigned char* out_device_ = nullptr;
  unsigned char* out_host_ = nullptr;
  size_t out_bytes_ = 0;
  unsigned char* in_device_ = nullptr;
  unsigned char* in_host_ = nullptr;
  size_t in_bytes_ = 0;
};

}  // namespace

std::unique_ptr<CudaSampling> make_cuda_sampling(int device, int64_t max_rows, int64_t n_vocab, int32_t max_k,
                                                 void* stream) {
  return std::make_unique<DeviceSampling>(device, max_rows, n_vocab, max_k, stream);
}

}  // namespace ga::cuda
