// How a kernel compiled by numba-cuda receives its arguments (Numba's CUDA kernel ABI), written
// without CUDA so that it is tested on any machine (tests/numba_array_abi_test.cc).
//
// Every argument is flattened into 8-byte kernel parameters:
//   an array of rank r:  meminfo, parent, nitems, itemsize, data, shape[r], strides[r]
//                        (5 + 2r parameters; meminfo = parent = 0 for memory Numba does not own;
//                        strides in bytes);
//   a float64 scalar:    its value; an int64 scalar: its value.
// jaxext/numba_bridge/compile_cuda.py checks every compiled kernel's PTX against this layout.
#ifndef JAXEXT_COMMON_NUMBA_ARRAY_ABI_H_
#define JAXEXT_COMMON_NUMBA_ARRAY_ABI_H_

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace jaxext {

// Parameters an array of `rank` dimensions takes.
constexpr size_t NumbaArraySlots(size_t rank) { return 5 + 2 * rank; }

// Where the data pointer sits among them.
constexpr size_t kNumbaArrayDataSlot = 4;

// Writes the parameters of a C-contiguous array (dims[rank], elements of `itemsize` bytes) into
// slots[0 .. NumbaArraySlots(rank)).
inline void WriteNumbaArray(int64_t* slots, const void* data, const int64_t* dims, size_t rank,
                            int64_t itemsize) {
  int64_t nitems = 1;
  for (size_t d = 0; d < rank; ++d) nitems *= dims[d];
  slots[0] = 0;  // meminfo
  slots[1] = 0;  // parent
  slots[2] = nitems;
  slots[3] = itemsize;
  slots[kNumbaArrayDataSlot] = static_cast<int64_t>(reinterpret_cast<uintptr_t>(data));
  int64_t stride = itemsize;
  for (size_t d = rank; d-- > 0;) {
    slots[5 + d] = dims[d];
    slots[5 + rank + d] = stride;
    stride *= dims[d];
  }
}

inline void SetNumbaArrayData(int64_t* slots, const void* data) {
  slots[kNumbaArrayDataSlot] = static_cast<int64_t>(reinterpret_cast<uintptr_t>(data));
}

// A float64 scalar parameter, bit for bit.
inline int64_t NumbaFloatSlot(double v) {
  int64_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  return bits;
}

}  // namespace jaxext

#endif  // JAXEXT_COMMON_NUMBA_ARRAY_ABI_H_
