// Linked only into portable builds (RAYFIELD_PORTABLE=1, the wheels of `nox -s release`),
// where libstdc++ is linked statically.
//
// libstdc++.a's random.o (std::random_device, pulled in by the library's own string
// instantiations, never called by rayfield) refers to arc4random, which glibc has only
// since 2.36: linked against the system's, the module would need glibc 2.36 to load at
// all. This hidden definition satisfies that reference inside the module, from
// getentropy (glibc 2.25), so the wheel's glibc floor is set by what rayfield itself
// calls (2.34: the pthread functions).
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

extern "C" __attribute__((visibility("hidden"))) uint32_t arc4random(void) noexcept {
  uint32_t value;
  while (getentropy(&value, sizeof value) != 0) {
    if (errno != EINTR) abort();  // getentropy fails only without a kernel getrandom
  }
  return value;
}
