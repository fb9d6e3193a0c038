// tfd_fault_proxy: the fault-injection proxy as a program, for trying faults by hand. Faults given
// as flags apply from the start; commands on stdin change them while it runs (see kCommands).
// Runs until SIGINT or SIGTERM, then prints its counters.

#include <signal.h>

#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>

#include <boost/program_options.hpp>
#include <fmt/format.h>

#include "test/tools/fault_proxy.h"

namespace po = boost::program_options;
using tfd::testing::Direction;
using tfd::testing::FaultProxy;
using tfd::testing::Refuse;

namespace {

constexpr const char* kCommands =
    "commands on stdin (DIR is c2s, s2c or both; default both):\n"
    "  delay MS [DIR] | stall [DIR] | resume [DIR] | reset | refuse no|close|reset |\n"
    "  drop-after N|off [DIR] | corrupt-at OFFSET [DIR] | corrupt-every N [DIR] | throttle BPS [DIR] |\n"
    "  clear | stats";

bool ParseDirection(const std::string& s, Direction* d) {
  if (s.empty() || s == "both") *d = Direction::kBoth;
  else if (s == "c2s") *d = Direction::kClientToServer;
  else if (s == "s2c") *d = Direction::kServerToClient;
  else return false;
  return true;
}

bool ParseRefuse(const std::string& s, Refuse* r) {
  if (s == "no") *r = Refuse::kNo;
  else if (s == "close") *r = Refuse::kClose;
  else if (s == "reset") *r = Refuse::kReset;
  else return false;
  return true;
}

std::string Stats(FaultProxy& p) {
  return fmt::format("connections_accepted={} open={} bytes_c2s={} bytes_s2c={}", p.connections_accepted(), p.open_connections(),
                     p.bytes_forwarded(Direction::kClientToServer), p.bytes_forwarded(Direction::kServerToClient));
}

// One stdin command; false (with a message on stderr) if it is not one.
bool Apply(FaultProxy& p, const std::string& line) {
  std::istringstream in(line);
  std::string cmd, arg, dir_word;
  in >> cmd >> arg >> dir_word;
  Direction dir = Direction::kBoth;
  const bool takes_arg = cmd == "delay" || cmd == "drop-after" || cmd == "corrupt-at" || cmd == "corrupt-every" || cmd == "throttle" ||
                        cmd == "refuse";
  if (!ParseDirection(takes_arg ? dir_word : arg, &dir)) return false;
  try {
    if (cmd == "delay") p.SetDelay(dir, std::chrono::milliseconds(std::stoll(arg)));
    else if (cmd == "stall") p.Stall(dir);
    else if (cmd == "resume") p.Resume(dir);
    else if (cmd == "reset") p.ResetAll();
    else if (cmd == "drop-after") p.SetDropAfter(dir, arg == "off" ? std::nullopt : std::optional<std::uint64_t>(std::stoull(arg)));
    else if (cmd == "corrupt-at") p.CorruptAt(dir, std::stoull(arg));
    else if (cmd == "corrupt-every") p.CorruptEvery(dir, std::stoull(arg));
    else if (cmd == "throttle") p.SetThrottle(dir, std::stoull(arg));
    else if (cmd == "clear") p.ClearFaults();
    else if (cmd == "stats") std::printf("%s\n", Stats(p).c_str());
    else if (cmd == "refuse") {
      Refuse r;
      if (!ParseRefuse(arg, &r)) return false;
      p.SetRefuse(r);
    } else {
      return false;
    }
  } catch (const std::exception&) {  // stoll/stoull on a bad number
    return false;
  }
  std::fflush(stdout);
  return true;
}

bool SplitHostPort(const std::string& s, bool allow_zero, std::string* host, std::uint16_t* port) {
  const auto colon = s.rfind(':');
  if (colon == std::string::npos || colon == 0) return false;
  try {
    const unsigned long v = std::stoul(s.substr(colon + 1));
    if ((v == 0 && !allow_zero) || v > 65535) return false;
    *port = static_cast<std::uint16_t>(v);
  } catch (const std::exception&) {
    return false;
  }
  *host = s.substr(0, colon);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::string listen, target, direction = "both", refuse = "no";
  long long delay_ms = 0;
  std::uint64_t drop_after = 0, corrupt_at = 0, corrupt_every = 0, throttle = 0;
  bool stall = false;
  po::options_description opts(
      "tfd_fault_proxy --listen [ADDR:]PORT --target HOST:PORT [faults]\n"
      "Forwards every connection to the target, injecting the given faults.\n" + std::string(kCommands) + "\n\noptions");
  opts.add_options()
      ("help,h", "print this help and exit")
      ("listen", po::value<std::string>(&listen)->value_name("[ADDR:]PORT"), "listen here (ADDR default 127.0.0.1; PORT 0: a free one, printed)")
      ("target", po::value<std::string>(&target)->value_name("HOST:PORT"), "forward to this peer")
      ("direction", po::value<std::string>(&direction)->value_name("DIR"), "c2s, s2c or both (default): where the fault flags apply")
      ("delay-ms", po::value<long long>(&delay_ms)->value_name("MS"), "hold each chunk this long")
      ("stall", po::bool_switch(&stall), "start stalled (a silent partition; 'resume' on stdin ends it)")
      ("drop-after", po::value<std::uint64_t>(&drop_after)->value_name("N"), "forward N bytes of each connection, then close it")
      ("corrupt-at", po::value<std::uint64_t>(&corrupt_at)->value_name("OFFSET"), "flip the low bit of the byte at this stream offset")
      ("corrupt-every", po::value<std::uint64_t>(&corrupt_every)->value_name("N"), "flip the low bit of every Nth byte")
      ("throttle-bps", po::value<std::uint64_t>(&throttle)->value_name("BPS"), "forward at most this many bytes per second")
      ("refuse", po::value<std::string>(&refuse)->value_name("MODE"), "no (default), close or reset new connections");
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(argc, argv).options(opts).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    std::fprintf(stderr, "tfd_fault_proxy: %s (see --help)\n", e.what());
    return 2;
  }
  if (vm.count("help")) {
    std::cout << opts << "\n";
    return 0;
  }
  tfd::testing::FaultProxyOptions options;
  const std::string listen_flag = listen;
  if (listen.find(':') == std::string::npos) listen = "127.0.0.1:" + listen;
  Direction dir;
  Refuse refuse_mode;
  if (!SplitHostPort(listen, /*allow_zero=*/true, &options.listen_address, &options.listen_port)) {
    std::fprintf(stderr, "tfd_fault_proxy: --listen: expected [ADDR:]PORT, got \"%s\"\n", listen_flag.c_str());
    return 2;
  }
  if (!SplitHostPort(target, /*allow_zero=*/false, &options.target_host, &options.target_port)) {
    std::fprintf(stderr, "tfd_fault_proxy: --target: expected HOST:PORT, got \"%s\"\n", target.c_str());
    return 2;
  }
  if (!ParseDirection(direction, &dir)) {
    std::fprintf(stderr, "tfd_fault_proxy: --direction: expected c2s, s2c or both, got \"%s\"\n", direction.c_str());
    return 2;
  }
  if (!ParseRefuse(refuse, &refuse_mode)) {
    std::fprintf(stderr, "tfd_fault_proxy: --refuse: expected no, close or reset, got \"%s\"\n", refuse.c_str());
    return 2;
  }

  // SIGINT/SIGTERM are taken by sigwait below, in this thread only.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  auto started = FaultProxy::Start(options);
  if (!started.ok()) {
    std::fprintf(stderr, "tfd_fault_proxy: %s\n", started.status().message().c_str());
    return 1;
  }
  FaultProxy& proxy = **started;
  if (delay_ms > 0) proxy.SetDelay(dir, std::chrono::milliseconds(delay_ms));
  if (stall) proxy.Stall(dir);
  if (vm.count("drop-after")) proxy.SetDropAfter(dir, drop_after);
  if (vm.count("corrupt-at")) proxy.CorruptAt(dir, corrupt_at);
  if (corrupt_every > 0) proxy.CorruptEvery(dir, corrupt_every);
  if (throttle > 0) proxy.SetThrottle(dir, throttle);
  proxy.SetRefuse(refuse_mode);
  std::printf("listening on %s:%u, forwarding to %s\n", options.listen_address.c_str(), proxy.port(), target.c_str());
  std::fflush(stdout);

  // Commands from stdin; at its end the proxy keeps running until a signal.
  std::thread([&proxy] {
    for (std::string line; std::getline(std::cin, line);) {
      if (line.find_first_not_of(" \t") == std::string::npos) continue;
      if (!Apply(proxy, line)) std::fprintf(stderr, "tfd_fault_proxy: not a command: \"%s\"\n%s\n", line.c_str(), kCommands);
    }
  }).detach();

  int sig = 0;
  sigwait(&stop_signals, &sig);
  std::printf("%s\n", Stats(proxy).c_str());
  std::fflush(stdout);
  std::_Exit(0);  // the stdin thread may be blocked in a read; the proxy's sockets close with the process
}
