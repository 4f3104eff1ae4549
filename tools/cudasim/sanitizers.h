// Which sanitizer this translation unit is built with (GCC and Clang spell it differently).
#pragma once

#if defined(__SANITIZE_ADDRESS__)
#define CUDASIM_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CUDASIM_ASAN 1
#endif
#endif

#if defined(__SANITIZE_THREAD__)
#define CUDASIM_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define CUDASIM_TSAN 1
#endif
#endif
