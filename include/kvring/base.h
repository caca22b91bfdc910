// kvring/base.h: assertion macros and the error value that every kvring header shares.
// Use Expected<T> for results that can fail at configuration time; KVRING_DASSERT guards
// hot-path preconditions. Throws nothing and needs no other header of kvring.
#ifndef KVRING_BASE_H_
#define KVRING_BASE_H_

#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>

// KVRING_HARDENED=1 keeps the debug assertions on in release builds.
#if !defined(KVRING_ENABLE_DASSERT)
#if !defined(NDEBUG) || defined(KVRING_HARDENED) || defined(__SANITIZE_ADDRESS__)
#define KVRING_ENABLE_DASSERT 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(undefined_behavior_sanitizer)
#define KVRING_ENABLE_DASSERT 1
#endif
#endif
#endif
#if !defined(KVRING_ENABLE_DASSERT)
#define KVRING_ENABLE_DASSERT 0
#endif

namespace kvring {
namespace detail {

[[noreturn]] inline void Abort(const char* file, int line, const char* what) {
  std::fprintf(stderr, "kvring: %s:%d: check failed: %s\n", file, line, what);
  std::fflush(stderr);
  std::abort();
}

}  // namespace detail
}  // namespace kvring

// Always checked: misuse of a configuration-time API (reading the value of a failed result).
#define KVRING_CHECK(condition)                                \
  do {                                                         \
    if (!(condition)) {                                        \
      ::kvring::detail::Abort(__FILE__, __LINE__, #condition); \
    }                                                          \
  } while (0)

// Checked in debug, sanitizer and hardened builds: preconditions of hot paths.
#if KVRING_ENABLE_DASSERT
#define KVRING_DASSERT(condition) KVRING_CHECK(condition)
#else
#define KVRING_DASSERT(condition) \
  do {                            \
  } while (0)
#endif

namespace kvring {

// A configuration error: the offending field (for example "layers[3].window") and a
// message that names it and its value.
struct Error {
  std::string field;
  std::string message;
};

namespace detail {

// Returns the Error of `field` whose value `value` breaks a rule: "<field>: <value> <why>".
inline Error FieldError(std::string field, const std::string& value, const std::string& why) {
  std::string message = field + ": " + value + " " + why;
  return Error{std::move(field), std::move(message)};
}

}  // namespace detail

// The value of a call that can fail at configuration time, or the Error that says why not.
// Reading value() of a failed result prints the error's message and aborts; check ok() first.
template <typename T>
class [[nodiscard]] Expected {
 public:
  Expected(T value) : ok_(true), value_(std::move(value)) {}       // NOLINT: implicit on purpose
  Expected(Error error) : ok_(false), error_(std::move(error)) {}  // NOLINT

  bool ok() const { return ok_; }
  explicit operator bool() const { return ok_; }

  const T& value() const& {
    CheckOk();
    return value_;
  }
  T& value() & {
    CheckOk();
    return value_;
  }
  T&& value() && {
    CheckOk();
    return std::move(value_);
  }
  const T& operator*() const& { return value(); }
  T& operator*() & { return value(); }
  const T* operator->() const { return &value(); }
  T* operator->() { return &value(); }

  // Returns the error; empty when ok().
  const Error& error() const { return error_; }

 private:
  // Reading the value of a failed result is a bug of the caller: say which error it ignored.
  void CheckOk() const {
    if (ok_) return;
    std::fprintf(stderr, "kvring: value() of a failed kvring::Expected: %s\n",
                 error_.message.c_str());
    KVRING_CHECK(ok_ && "value() of a failed kvring::Expected");
  }

  bool ok_;
  T value_{};
  Error error_;
};

}  // namespace kvring

#endif  // KVRING_BASE_H_
