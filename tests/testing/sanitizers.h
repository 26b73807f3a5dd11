// Whether this test program (and the kerntuned it starts, built alike) runs
// under a sanitizer. Their allocators abort on a request too large to serve
// (unless allocator_may_return_null=1) where the normal build's returns an
// error, and they map memory of their own as threads start: tests of those
// failures are skipped there.
#ifndef KERNTUNE_TESTS_TESTING_SANITIZERS_H_
#define KERNTUNE_TESTS_TESTING_SANITIZERS_H_

namespace kt::testing {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool kSanitizerBuild = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || \
    __has_feature(memory_sanitizer)
inline constexpr bool kSanitizerBuild = true;
#else
inline constexpr bool kSanitizerBuild = false;
#endif
#else
inline constexpr bool kSanitizerBuild = false;
#endif

}  // namespace kt::testing

#endif  // KERNTUNE_TESTS_TESTING_SANITIZERS_H_
