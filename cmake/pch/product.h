#pragma once
// The headers most product translation units include, precompiled once (at -O3) and reused by the
// product targets that include Asio (cmake/pch.cmake, TFD_PCH): Asio, nlohmann/json, spdlog and fmt
// are most of such a unit's front end. A source still includes what it uses; a build with
// TFD_PCH=OFF shows a file that does not.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <utility>  // before Asio: Boost 1.74's awaitable.hpp forgets it
#include <vector>

#include <boost/asio.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>
