#include "common/base/terminal.h"

#include <sys/ioctl.h>
#include <unistd.h>

namespace tfd {

int TerminalColumns(int fd) {
  winsize w{};
  if (isatty(fd) != 1 || ioctl(fd, TIOCGWINSZ, &w) != 0) return 0;
  return w.ws_col;
}

std::string CutToColumns(std::string_view line, int columns) {
  if (columns <= 0) return std::string(line);
  int used = 0;
  std::size_t i = 0;
  while (i < line.size()) {
    // A character starts at a byte that is not a UTF-8 continuation byte (10xxxxxx).
    if ((static_cast<unsigned char>(line[i]) & 0xC0) != 0x80) {
      if (used == columns) break;
      ++used;
    }
    ++i;
  }
  return std::string(line.substr(0, i));
}

void LiveBlock::Clear() {
  if (drawn_ == 0) return;
  std::fprintf(out_, "\x1b[%dA\x1b[J", drawn_);
  drawn_ = 0;
}

void LiveBlock::Draw(const std::vector<std::string>& lines) {
  Clear();
  const int columns = TerminalColumns(fd_);
  for (const std::string& l : lines) std::fprintf(out_, "%s\n", CutToColumns(l, columns > 1 ? columns - 1 : 0).c_str());
  drawn_ = static_cast<int>(lines.size());
  std::fflush(out_);
}

}  // namespace tfd
