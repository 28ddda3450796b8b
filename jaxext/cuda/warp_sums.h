// Sums over a warp's 32 lanes (the .cu halves' device code).
//
// WarpSum adds one value over the lanes by xor shuffles (offsets 16, 8, 4, 2, 1): every lane
// ends with the sum. WarpSums adds K values at once and gives each sum to one lane only, which
// costs about K + 5 shuffles instead of WarpSum's 5 K: at each offset a lane keeps one half of its
// values and sends the other half to its partner (the lane its offset bit apart), which keeps the
// other half; after the five offsets every value has been added over all 32 lanes, and each lane
// holds ceil(K / 32) or fewer of the K sums. Every sum is WarpSum's, bit for bit (but for a NaN's
// payload): a value meets the same partners at the same offsets in the same order (a lane's own
// part first), and the two lanes of a pair compute the same sum (IEEE addition commutes).
#ifndef JAXEXT_CUDA_WARP_SUMS_H_
#define JAXEXT_CUDA_WARP_SUMS_H_

namespace jaxext {
namespace cuda {

constexpr int kWarpLanes = 32;

template <typename T>
__device__ __forceinline__ T WarpSum(T v) {
#pragma unroll
  for (int s = kWarpLanes / 2; s > 0; s /= 2) v += __shfl_xor_sync(0xffffffffu, v, s);
  return v;
}

namespace warp_sums_internal {

// One offset S of WarpSums: v (L values: elements base .. base + L - 1, of which the first
// `count` are real, the rest zeros) becomes ceil(L / 2) values summed over twice the lanes.
template <typename T, int L, int S, typename Store>
__device__ __forceinline__ void Halve(const T (&v)[L], int lane, int base, int count,
                                      Store& store) {
  constexpr int H = (L + 1) / 2;
  const bool upper = (lane & S) != 0;  // this lane keeps the upper half, its partner the lower
  T kept[H];
#pragma unroll
  for (int i = 0; i < H; ++i) {
    const T low = v[i];
    const T high = H + i < L ? v[H + i < L ? H + i : 0] : T(0);  // (index in range: unrolled)
    const T keep = upper ? high : low;
    const T send = upper ? low : high;
    kept[i] = keep + __shfl_xor_sync(0xffffffffu, send, S);
  }
  base += upper ? H : 0;
  count = upper ? (count > H ? count - H : 0) : (count < H ? count : H);
  if constexpr (S > 1) {
    Halve<T, H, S / 2>(kept, lane, base, count, store);
  } else {
#pragma unroll
    for (int i = 0; i < H; ++i) {
      if (i < count) store(base + i, kept[i]);
    }
  }
}

}  // namespace warp_sums_internal

// Every v[t] summed over the warp's lanes; store(t, sum) is called once per t, by one lane (the
// whole warp must call WarpSums, with the same K).
template <typename T, int K, typename Store>
__device__ __forceinline__ void WarpSums(const T (&v)[K], int lane, Store store) {
  warp_sums_internal::Halve<T, K, kWarpLanes / 2>(v, lane, 0, K, store);
}

}  // namespace cuda
}  // namespace jaxext

#endif  // JAXEXT_CUDA_WARP_SUMS_H_
