#pragma once

#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

namespace tfd {

// The columns of the terminal on `fd` (TIOCGWINSZ), or 0 when `fd` is not a terminal or says none.
int TerminalColumns(int fd);

// The first `columns` columns of `line`: one column per UTF-8 character (a multi-byte character is
// never cut in two); `line` whole when it fits, or when `columns` is 0 (no terminal width known).
std::string CutToColumns(std::string_view line, int columns);

// A block of lines kept at the bottom of a terminal and redrawn in place: tfctl's live table and a
// sweep's leaderboard. Each line is cut to the terminal's width less one column, so none wraps,
// and a redraw moves up over exactly the lines it drew. Lines printed between redraws go above it
// (Clear, print, Draw). Writes to `out`, whose terminal is `fd`; one thread uses it.
class LiveBlock {
 public:
  LiveBlock(std::FILE* out, int fd) : out_(out), fd_(fd) {}
  // Erases the block drawn last (nothing when none is drawn).
  void Clear();
  // Clears the block, then draws `lines` in its place and flushes.
  void Draw(const std::vector<std::string>& lines);

 private:
  std::FILE* out_;
  int fd_;
  int drawn_ = 0;
};

}  // namespace tfd
