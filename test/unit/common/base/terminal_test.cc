// common/base/terminal.h: the live table's lines cut to the terminal's width, and redrawn in place.
#include <cstdio>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "common/base/terminal.h"
#include "test/test_util.h"

namespace tfd {

TEST_CASE("CutToColumns keeps the first N characters and never splits a UTF-8 character", "[unit][terminal]") {
  CHECK(CutToColumns("worker:1 epoch=3", 8) == "worker:1");
  CHECK(CutToColumns("short", 80) == "short");
  CHECK(CutToColumns("no width known", 0) == "no width known");
  CHECK(CutToColumns("", 5).empty());
  // "é" and "→" are 2 and 3 bytes: one column each.
  CHECK(CutToColumns("a\xc3\xa9\xe2\x86\x92z", 3) == "a\xc3\xa9\xe2\x86\x92");
  CHECK(CutToColumns("a\xc3\xa9\xe2\x86\x92z", 2) == "a\xc3\xa9");
}

TEST_CASE("LiveBlock moves up over exactly the lines it drew, and leaves lines whole without a terminal", "[unit][terminal]") {
  testing::TempDir dir;
  const std::string path = dir / "out.txt";
  std::FILE* out = std::fopen(path.c_str(), "w");
  REQUIRE(out != nullptr);
  CHECK(TerminalColumns(fileno(out)) == 0);
  LiveBlock block(out, fileno(out));
  const std::string wide(300, 'x');
  block.Draw({"one", wide});
  block.Draw({"three"});
  block.Clear();
  block.Clear();  // nothing drawn: nothing written
  std::fclose(out);
  CHECK(testing::ReadAll(path) == "one\n" + wide + "\n\x1b[2A\x1b[Jthree\n\x1b[1A\x1b[J");
}

}  // namespace tfd
