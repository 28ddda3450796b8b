// A minimal check for the C++ unit tests of header-only pieces (no test framework in the
// toolchain root): EXPECT_EQ counts failures and prints each; main returns ExpectResult().
#ifndef JAXEXT_TESTS_EXPECT_H_
#define JAXEXT_TESTS_EXPECT_H_

#include <cstdio>

namespace jaxext_test {

inline int& Failures() {
  static int failures = 0;
  return failures;
}

inline int ExpectResult() {
  if (Failures()) {
    std::printf("%d failure(s)\n", Failures());
    return 1;
  }
  std::printf("all passed\n");
  return 0;
}

}  // namespace jaxext_test

// Integer-valued equality (values compared as long long).
#define EXPECT_EQ(a, b)                                                                      \
  do {                                                                                       \
    const long long va = static_cast<long long>(a), vb = static_cast<long long>(b);          \
    if (va != vb) {                                                                          \
      ++jaxext_test::Failures();                                                             \
      std::printf("FAILED %s:%d: %s == %s: %lld != %lld\n", __FILE__, __LINE__, #a, #b, va,  \
                  vb);                                                                       \
    }                                                                                        \
  } while (0)

#endif  // JAXEXT_TESTS_EXPECT_H_
