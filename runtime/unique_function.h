// UniqueFunction<R(Args...)>: a move-only callable with inline storage for
// small captures, so pushing an engine operation does not allocate for the
// common closure (a few pointers). Larger callables go to the heap.
#pragma once

#include <cstddef>
#include <new>
#include <type_traits>
#include <utility>

namespace kiln {

template <typename Sig>
class UniqueFunction;

template <typename R, typename... Args>
class UniqueFunction<R(Args...)> {
  static constexpr size_t kInline = 48;

 public:
  UniqueFunction() = default;
  UniqueFunction(std::nullptr_t) {}

  template <typename F, typename D = std::decay_t<F>,
            typename = std::enable_if_t<!std::is_same_v<D, UniqueFunction> && std::is_invocable_r_v<R, D&, Args...>>>
  UniqueFunction(F&& f) {  // NOLINT: implicit like std::function
    if constexpr (sizeof(D) <= kInline && alignof(D) <= alignof(std::max_align_t) &&
                  std::is_nothrow_move_constructible_v<D>) {
      ::new (static_cast<void*>(buf_)) D(std::forward<F>(f));
      ops_ = &inline_ops<D>;
    } else {
      *reinterpret_cast<D**>(buf_) = new D(std::forward<F>(f));
      ops_ = &heap_ops<D>;
    }
  }

  UniqueFunction(UniqueFunction&& o) noexcept : ops_(o.ops_) {
    if (ops_) ops_->move(o.buf_, buf_);
    o.ops_ = nullptr;
  }
  UniqueFunction& operator=(UniqueFunction&& o) noexcept {
    if (this != &o) {
      reset();
      ops_ = o.ops_;
      if (ops_) ops_->move(o.buf_, buf_);
      o.ops_ = nullptr;
    }
    return *this;
  }
  UniqueFunction(const UniqueFunction&) = delete;
  UniqueFunction& operator=(const UniqueFunction&) = delete;
  ~UniqueFunction() { reset(); }

  explicit operator bool() const { return ops_ != nullptr; }
  R operator()(Args... args) { return ops_->call(buf_, std::forward<Args>(args)...); }

  void reset() {
    if (ops_) ops_->destroy(buf_);
    ops_ = nullptr;
  }

 private:
  struct Ops {
    R (*call)(void*, Args&&...);
    void (*move)(void* from, void* to);
    void (*destroy)(void*);
  };
  template <typename D>
  static constexpr Ops inline_ops = {
      [](void* p, Args&&... a) -> R { return (*static_cast<D*>(p))(std::forward<Args>(a)...); },
      [](void* from, void* to) {
        ::new (to) D(std::move(*static_cast<D*>(from)));
        static_cast<D*>(from)->~D();
      },
      [](void* p) { static_cast<D*>(p)->~D(); }};
  template <typename D>
  static constexpr Ops heap_ops = {
      [](void* p, Args&&... a) -> R { return (**static_cast<D**>(p))(std::forward<Args>(a)...); },
      [](void* from, void* to) { *static_cast<D**>(to) = *static_cast<D**>(from); },
      [](void* p) { delete *static_cast<D**>(p); }};

  alignas(std::max_align_t) unsigned char buf_[kInline];
  const Ops* ops_ = nullptr;
};

}  // namespace kiln
