// The small "detail" layer under the weight decoders: byte-level loads and exact int -> float tricks.
//
// GGUF blocks are 18, 20, 22, 34, 144, 176 or 210 bytes, so their fields sit at any 2-byte offset.
// The kernels therefore never read a field with a typed load; they stage raw row bytes (16-byte
// loads) and read fields with load_u32_any(), which combines two aligned 32-bit words with one
// funnel shift. Readers of a staged buffer must leave 4 readable bytes after its last used byte.
//
// Integer-to-float conversion (I2F) runs at a quarter of the FMA rate on recent GPUs, too slow for
// 4-bit weights streamed at full bandwidth, so small unsigned integers become floats with the
// "magic number" trick: the bit pattern 0x4B000000 | q is the float 2^23 + q, and subtracting
// 2^23 + bias gives q - bias exactly (one PRMT and one FADD per weight, no conversion unit).
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

namespace ga::cuda::detail {

inline constexpr float kMagic2p23 = 8388608.0f;  // 2^23: floats from 2^23 to 2^24 step by exactly 1
inline constexpr uint32_t kMagic2p23Bits = 0x4B000000u;

// 32 bits starting at any byte address (reads the aligned words that cover it).
__device__ __forceinline__ uint32_t load_u32_any(const uint8_t* p) {
  const uintptr_t addr = reinterpret_cast<uintptr_t>(p);
  const uint32_t* words = reinterpret_cast<const uint32_t*>(addr & ~uintptr_t{3});
  const uint32_t shift = static_cast<uint32_t>(addr & 3) * 8;
  return __funnelshift_r(words[0], words[1], shift);
}

__device__ __forceinline__ float load_half_any(const uint8_t* p) {
  return __half2float(__ushort_as_half(static_cast<unsigned short>(load_u32_any(p) & 0xFFFFu)));
}

// out[i] = (byte i of v) - bias, exact for bias an integer in [0, 2^22).
__device__ __forceinline__ void bytes_to_floats(uint32_t v, float bias, float* out) {
  const float offset = kMagic2p23 + bias;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    // bytes of the result: [byte i of v, 0x00, 0x00, 0x4B] (selector nibbles 4 and 7 read kMagic2p23Bits)
    out[i] = __uint_as_float(__byte_perm(v, kMagic2p23Bits, 0x7440u + static_cast<uint32_t>(i))) - offset;
  }
}

// The 4 bits of `nibble` (bits 0..3) moved to bit 0 of bytes 0..3 (no carries: the shifted copies
// of a 4-bit value at 0, 7, 14, 21 do not overlap).
__device__ __forceinline__ uint32_t spread_bits_to_bytes(uint32_t nibble) {
  return (nibble * 0x00204081u) & 0x01010101u;
}

// 16 bytes from global memory that no kernel writes meanwhile, bypassing L1 (weights are streamed
// once; L1 keeps the activations that every warp re-reads).
__device__ __forceinline__ uint4 load_stream_16(const uint8_t* p) {
#if defined(__CUDA_ARCH__)
  uint4 v;  // not volatile: a pure load the compiler may schedule early (that is the point)
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
#else  // host pass of nvcc, and host-side emulation in tests
  return *reinterpret_cast<const uint4*>(p);
#endif
}

// 4 activations (16-byte aligned) that an earlier kernel wrote: a coherent load through L1, never
// ld.global.nc (__ldg). Kernels launched after their producer with PDL (pdl.cuh) share the device
// with it until pdl_wait_prior_grid(); a non-coherent load promises the data is read-only for the
// whole kernel, so the compiler may move it above that wait (with __ldg here the f32 fixture model's decode
// failed in the first PDL run), and a plain load keeps its place.
__device__ __forceinline__ float4 load_activations_4(const float* p) { return *reinterpret_cast<const float4*>(p); }

// The aligned 16 bytes at p, or for the chunk that crosses `end` the bytes before it (zeros after),
// so a buffer whose size is not a multiple of 16 is never read past its end.
__device__ __forceinline__ uint4 load_chunk_16(const uint8_t* p, const uint8_t* end) {
  if (p + 16 <= end) return load_stream_16(p);
  uint32_t words[4] = {0, 0, 0, 0};
#pragma unroll  // constant indices keep words[] in registers
  for (int i = 0; i < 16; ++i) {
    if (p + i < end) words[i / 4] |= static_cast<uint32_t>(p[i]) << (8 * (i % 4));
  }
  return make_uint4(words[0], words[1], words[2], words[3]);
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

}  // namespace ga::cuda::detail
