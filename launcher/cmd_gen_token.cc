#include <cstdio>

#include "common/transport/auth.h"
#include "launcher/cli.h"
#include "launcher/commands.h"

namespace tfd::launcher {

int GenToken(const std::vector<std::string>& args) {
  std::string path;
  CommandLine line("gen-token");
  line.Positional(&path, "FILE");
  if (Status s = line.Parse(args); !s.ok()) return UsageError(s.message());
  if (path.empty()) return UsageError("gen-token needs one FILE to write");
  if (Status s = transport::ClusterToken::Generate().WriteFile(path); !s.ok()) {
    std::fprintf(stderr, "tfctl: %s\n", s.message().c_str());
    return 1;
  }
  std::printf("tfctl: wrote a new cluster token to %s (mode 0600). Copy it to every host of the cluster (scp -p keeps the "
              "mode) and start each tfd with --token-file %s\n",
              path.c_str(), path.c_str());
  return 0;
}

}  // namespace tfd::launcher
