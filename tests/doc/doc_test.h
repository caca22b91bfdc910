// What every snippet of the doc test (tests/doc/extract_snippets.cmake) may use without
// including it, as the text around a snippet assumes an engine has: the standard library
// pieces engines use, and kvring's headers.
#ifndef KVRING_TESTS_DOC_DOC_TEST_H_
#define KVRING_TESTS_DOC_DOC_TEST_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "kvring/dispatch.h"
#include "kvring/kvring.h"

#endif  // KVRING_TESTS_DOC_DOC_TEST_H_
