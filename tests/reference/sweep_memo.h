// tests/reference/sweep_memo.h: what a kernel sweep's case computes alike on every target (its
// random inputs, float64 references, int8 encodings), made by the first target that runs the
// case and kept for the next ones. A sweep runs the same cases on every compiled target, and
// recomputing those on each was more than half of its time under the sanitizers (58 % of one
// sweep in `perf`, when the reference still read K/V per element).
#ifndef KVRING_TESTS_REFERENCE_SWEEP_MEMO_H_
#define KVRING_TESTS_REFERENCE_SWEEP_MEMO_H_

#include <map>
#include <memory>
#include <string>
#include <utility>

namespace kvring {
namespace reference {

class SweepMemo {
 public:
  // Returns the value kept under `key`, made by `make()` (returning a T) the first time the
  // key is asked for. A key names one value of one type: the caller puts what the value is
  // (and every input it depends on) in it. The reference stays valid until Clear().
  template <typename T, typename Make>
  const T& Get(const std::string& key, const Make& make) {
    auto it = kept_.find(key);
    if (it == kept_.end()) {
      std::shared_ptr<const void> value = std::make_shared<const T>(make());
      it = kept_.emplace(key, std::move(value)).first;
    }
    return *static_cast<const T*>(it->second.get());
  }

  // Forgets every value (the end of a sweep).
  void Clear() { kept_.clear(); }

 private:
  std::map<std::string, std::shared_ptr<const void>> kept_;
};

}  // namespace reference
}  // namespace kvring

#endif  // KVRING_TESTS_REFERENCE_SWEEP_MEMO_H_
