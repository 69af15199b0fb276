// The recurrent kernels of RWKV (v4-v7): token shift and the WKV recurrences, over the runs of a step.
//
// A step's rows are runs of consecutive positions of one sequence each (step_ops.h, BatchToken); a run carries
// its sequence's state in one slot of a pool of per-sequence state (the engine's recurrent pool): the state is
// read at the run's first row, the recurrence walks the run's rows in order, and the state is written back
// after its last row. A run whose first position is 0 starts from the initial state (zeros; wkv4's running
// maximum -1e30) whatever the slot holds, so a slot is reused by a new sequence without clearing it.
//
// Parallelism: the token shift is row-parallel (only the run's first row touches the slot: it reads the old
// state and writes the new one, so no two threads race on it); the WKVs are sequential over a run's rows and
// parallel over channels (wkv4: one thread per channel) or heads (wkv5 / wkv7: one CTA per head and run, its
// [head_size x head_size] state in shared memory, one thread per column / row of it). That is the recurrent
// form (rwkv.cpp's and the RWKV CUDA kernels' decode form); a decode step is one row per run.
//
// Same conventions as ops.h: device pointers, sizes and strides in elements, the stream last, the launch
// status back; *_unsupported_reason says why parameters are refused. Launched with PDL (pdl.cuh).
// CPU references: the recurrent ops of backends/cpu/step_engine.cpp; tests/cuda/test_cuda_recurrent.cpp
// compares them.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace ga::cuda {

// Where a step's runs are and where their state lives. Run s owns rows [q_start[s], q_start[s + 1]) and starts
// at position pos0[s]; q_start == nullptr: one run of all n_rows rows starting at *pos0 (one sequence). Its
// state is floats [offset, offset + floats of the op) of slot slot[s] (slot == nullptr: slot 0) of `state`, whose
// slots are slot_floats apart.
struct RecurrentRuns {
  const int32_t* q_start = nullptr;
  const int32_t* pos0 = nullptr;
  const int32_t* slot = nullptr;
  int n_seqs = 1;
  int64_t n_rows = 0;
  float* state = nullptr;
  int64_t slot_floats = 0;
  int64_t offset = 0;
};
const char* recurrent_runs_unsupported_reason(const RecurrentRuns& runs);

// prev[t] = x[t - 1] within a run; prev[first row] = the slot's x (zeros at position 0); then the slot keeps the
// run's last x. n columns; the state is n floats.
cudaError_t token_shift(const RecurrentRuns& runs, const float* x, int64_t ldx, float* prev, int64_t ld_prev,
                        int64_t n, cudaStream_t stream);

// RWKV 4's WKV, numerically stable form (step_ops.h, Wkv4Op); state: aa, bb, pp of n channels each.
struct Wkv4Params {
  RecurrentRuns runs;
  const float* k = nullptr;
  const float* v = nullptr;
  float* out = nullptr;
  int64_t ldk = 0, ldv = 0, ld_out = 0;
  const float* time_first = nullptr;  // [n]
  const float* time_decay = nullptr;  // [n], stored as -exp(w)
  int64_t n = 0;
};
const char* wkv4_unsupported_reason(const Wkv4Params& p);
cudaError_t wkv4(const Wkv4Params& p, cudaStream_t stream);

// RWKV 5/6's WKV (Wkv5Op): per head a [head_size x head_size] state. time_first and decay hold n_head *
// head_size values or one per head (u_per_head / w_per_head); decay_rows (v6): a per-row decay instead.
struct Wkv5Params {
  RecurrentRuns runs;
  const float* r = nullptr;
  const float* k = nullptr;
  const float* v = nullptr;
  float* out = nullptr;
  int64_t ldr = 0, ldk = 0, ldv = 0, ld_out = 0;
  const float* time_first = nullptr;
  bool u_per_head = false;
  const float* decay = nullptr;
  bool w_per_head = false;
  const float* decay_rows = nullptr;
  int64_t ld_decay = 0;
  int64_t n_head = 0, head_size = 0;  // head_size <= 64
};
const char* wkv5_unsupported_reason(const Wkv5Params& p);
cudaError_t wkv5(const Wkv5Params& p, cudaStream_t stream);

// RWKV 7's WKV with its key preparation (Wkv7Op): out and bonus per row.
struct Wkv7Params {
  RecurrentRuns runs;
  const float *r = nullptr, *w = nullptr, *k = nullptr, *v = nullptr, *a = nullptr;
  int64_t ldr = 0, ldw = 0, ldk = 0, ldv = 0, lda = 0;
  const float *k_k = nullptr, *k_a = nullptr, *r_k = nullptr;  // [n_head * head_size]
  float* out = nullptr;
  float* bonus = nullptr;
  int64_t ld_out = 0, ld_bonus = 0;
  int64_t n_head = 0, head_size = 0;  // head_size <= 64
};
const char* wkv7_unsupported_reason(const Wkv7Params& p);
cudaError_t wkv7(const Wkv7Params& p, cudaStream_t stream);

}  // namespace ga::cuda
