#include "common/base/service.h"

#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#if TFD_HAVE_SYSTEMD
#include <systemd/sd-daemon.h>
#endif

namespace tfd {

namespace {
void Notify(const std::string& state) {
#if TFD_HAVE_SYSTEMD
  sd_notify(0, state.c_str());
#else
  (void)state;
#endif
}
}  // namespace

void NotifyReady(std::string_view status) { Notify("READY=1\nSTATUS=" + std::string(status)); }
void NotifyStatus(std::string_view status) { Notify("STATUS=" + std::string(status)); }
void NotifyStopping() { Notify("STOPPING=1"); }

bool StderrIsJournal() {
  const char* stream = std::getenv("JOURNAL_STREAM");
  if (stream == nullptr) return false;
  struct stat st {};
  if (fstat(2, &st) != 0) return false;
  unsigned long long dev = 0, ino = 0;
  if (std::sscanf(stream, "%llu:%llu", &dev, &ino) != 2) return false;
  return dev == static_cast<unsigned long long>(st.st_dev) && ino == static_cast<unsigned long long>(st.st_ino);
}

}  // namespace tfd
