#pragma once
// The headers that most test files include, precompiled once and reused by every test binary
// (test/CMakeLists.txt): Catch2's header alone is about 17,000 lines.
#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
