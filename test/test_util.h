#pragma once
// Helpers shared by the tests: temporary folders, small IDX files, and running a binary.

#include <sys/wait.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

namespace tfd::testing {

// A fresh folder under the system temp dir, removed with everything in it on destruction.
class TempDir {
 public:
  TempDir() {
    std::random_device rd;
    path_ = std::filesystem::temp_directory_path() / ("tfd-test-" + std::to_string(rd()) + std::to_string(rd()));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string path() const { return path_.string(); }
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

inline void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

inline std::string BigEndian32(std::uint32_t v) {
  return {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8), static_cast<char>(v)};
}

// The bytes of a ubyte IDX file with the given dims and data.
inline std::string IdxBytes(const std::vector<std::uint32_t>& dims, const std::vector<std::uint8_t>& data) {
  std::string s = BigEndian32(0x0800u | static_cast<std::uint32_t>(dims.size()));
  for (std::uint32_t d : dims) s += BigEndian32(d);
  s.append(reinterpret_cast<const char*>(data.data()), data.size());
  return s;
}

// Writes a synthetic, well-separated classification set as the four MNIST file names in `dir`:
// class c lights a distinct band of pixels, plus noise.
inline void WriteSyntheticMnist(const std::string& dir, int train, int test, int side = 8, int classes = 4,
                                std::uint32_t seed = 7) {
  std::mt19937 gen(seed);
  auto make = [&](int n, const std::string& images, const std::string& labels) {
    std::vector<std::uint8_t> x(static_cast<std::size_t>(n) * side * side), y(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) {
      int c = static_cast<int>(gen() % classes);
      y[i] = static_cast<std::uint8_t>(c);
      for (int p = 0; p < side * side; ++p) {
        bool lit = (p / side) * classes / side == c;  // rows of band c
        int v = (lit ? 180 : 20) + static_cast<int>(gen() % 60);
        x[static_cast<std::size_t>(i) * side * side + p] = static_cast<std::uint8_t>(v);
      }
    }
    WriteFile(dir + "/" + images, IdxBytes({static_cast<std::uint32_t>(n), static_cast<std::uint32_t>(side),
                                             static_cast<std::uint32_t>(side)}, x));
    WriteFile(dir + "/" + labels, IdxBytes({static_cast<std::uint32_t>(n)}, y));
  };
  make(train, "train-images-idx3-ubyte", "train-labels-idx1-ubyte");
  make(test, "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte");
}

struct CommandResult {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

// Runs `command` through /bin/sh with stdout and stderr captured to files in `dir`.
inline CommandResult RunCommand(const std::string& command, const TempDir& dir) {
  const std::string out = dir / "cmd.stdout", err = dir / "cmd.stderr";
  int status = std::system((command + " >" + out + " 2>" + err + " </dev/null").c_str());
  CommandResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  auto slurp = [](const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  r.out = slurp(out);
  r.err = slurp(err);
  return r;
}

}  // namespace tfd::testing
