// tfctl: starts a whole tfd cluster from one cluster file, shows every worker's progress and keeps a
// run folder. main() hands the command line to Tfctl (launcher/commands.h), which picks the
// subcommand; exit codes: 0 every task done, 1 a task failed, 2 a bad file or usage, 130 after Ctrl-C.
#include <atomic>
#include <string>
#include <vector>

#include "launcher/commands.h"

namespace {

// The one piece of process-wide state: a signal handler can reach nothing else.
std::atomic<int> g_signal{0};
extern "C" void OnSignal(int sig) { g_signal.store(sig); }

}  // namespace

int main(int argc, char** argv) {
  return tfd::launcher::Tfctl(std::vector<std::string>(argv + 1, argv + argc), {.flag = &g_signal, .handler = OnSignal});
}
