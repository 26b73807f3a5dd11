// Version of the kernel library's code generation, recorded beside every
// tuning result so results measured with older kernels read as stale. Bump
// the "+k" number whenever a kernel, the config space or the heuristic
// changes in a way that can change a measured time.
#ifndef KERNTUNE_KERNELS_VERSION_H_
#define KERNTUNE_KERNELS_VERSION_H_

namespace kt::kernels {

inline constexpr char kKernelLibraryVersion[] = "0.1.0+k9";

}  // namespace kt::kernels

#endif  // KERNTUNE_KERNELS_VERSION_H_
