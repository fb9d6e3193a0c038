#include "common/ckpt/reshard.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>

#include <fmt/format.h>

namespace tfd::ckpt {
namespace {

// The variables sorted by flat offset, each with its tensor; InvalidArgument on overlaps.
struct Span {
  std::int64_t begin = 0, end = 0;
  std::size_t index = 0;  // into variables
};
Result<std::vector<Span>> SortVariables(const std::vector<Variable>& variables) {
  std::vector<Span> spans;
  for (std::size_t i = 0; i < variables.size(); ++i) {
    const Variable& v = variables[i];
    if (v.flat_offset < 0 || v.size < 0) return Status::InvalidArgument(fmt::format("variable {}: negative offset or size", v.name));
    spans.push_back({v.flat_offset, v.flat_offset + v.size, i});
  }
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) { return a.begin < b.begin; });
  for (std::size_t i = 1; i < spans.size(); ++i)
    if (spans[i].begin < spans[i - 1].end)
      return Status::InvalidArgument(fmt::format("variables {} and {} overlap", variables[spans[i - 1].index].name,
                                                 variables[spans[i].index].name));
  return spans;
}

// Calls fn(variable index, offset in variable, offset in shard, count) for each piece of `ranges`.
template <typename Fn>
Status ForEachPiece(const std::vector<Span>& spans, const std::vector<Variable>& variables, const std::vector<FlatRange>& ranges,
                    std::size_t ps, Fn fn) {
  std::int64_t q = 0;
  for (const FlatRange& r : ranges) {
    if (r.flat_offset < 0 || r.length < 0) return Status::InvalidArgument(fmt::format("ps {}: negative range", ps));
    std::int64_t p = r.flat_offset;
    const std::int64_t end = r.flat_offset + r.length;
    while (p < end) {
      auto it = std::upper_bound(spans.begin(), spans.end(), p, [](std::int64_t x, const Span& s) { return x < s.begin; });
      if (it == spans.begin() || (it - 1)->end <= p)
        return Status::InvalidArgument(fmt::format("ps {}: flat offset {} is in no variable", ps, p));
      const Span& s = *(it - 1);
      const std::int64_t n = std::min(end, s.end) - p;
      fn(s.index, p - variables[s.index].flat_offset, q, n);
      p += n;
      q += n;
    }
  }
  return Status::Ok();
}

std::int64_t TotalLength(const std::vector<FlatRange>& ranges) {
  std::int64_t n = 0;
  for (const FlatRange& r : ranges) n += r.length;
  return n;
}

}  // namespace

Result<std::vector<ShardState>> Reshard(const Checkpoint& ckpt, const std::vector<Variable>& variables,
                                        const std::vector<std::vector<FlatRange>>& shards) {
  std::map<std::string, const NamedTensor*, std::less<>> by_name;
  for (const NamedTensor& t : ckpt.tensors) by_name[t.name] = &t;
  const std::size_t num_slots = ckpt.optimizer.slot_names.size();
  std::vector<const NamedTensor*> tensor(variables.size());
  for (std::size_t i = 0; i < variables.size(); ++i) {
    const Variable& v = variables[i];
    auto it = by_name.find(v.name);
    if (it == by_name.end()) return Status::InvalidArgument(fmt::format("variable {} is not in the checkpoint", v.name));
    const NamedTensor& t = *it->second;
    if (static_cast<std::int64_t>(t.values.size()) != v.size)
      return Status::InvalidArgument(fmt::format("variable {}: the model has {} values, the checkpoint {}", v.name, v.size, t.values.size()));
    if (t.slots.size() != num_slots) return Status::InvalidArgument(fmt::format("variable {}: slots do not match the optimizer's", v.name));
    tensor[i] = &t;
  }
  TFD_ASSIGN_OR_RETURN(std::vector<Span> spans, SortVariables(variables));
  std::vector<ShardState> out(shards.size());
  for (std::size_t ps = 0; ps < shards.size(); ++ps) {
    const std::int64_t size = TotalLength(shards[ps]);
    ShardState& st = out[ps];
    st.values.resize(static_cast<std::size_t>(size));
    st.slots.resize(static_cast<std::size_t>(size) * num_slots);
    TFD_RETURN_IF_ERROR(ForEachPiece(spans, variables, shards[ps], ps, [&](std::size_t vi, std::int64_t at, std::int64_t q, std::int64_t n) {
      const NamedTensor& t = *tensor[vi];
      std::copy_n(t.values.begin() + at, n, st.values.begin() + q);
      for (std::size_t k = 0; k < num_slots; ++k)
        std::copy_n(t.slots[k].values.begin() + at, n, st.slots.begin() + static_cast<std::int64_t>(k) * size + q);
    }));
  }
  return out;
}

Result<std::vector<NamedTensor>> Assemble(const std::vector<Variable>& variables, const std::vector<std::vector<std::int64_t>>& shapes,
                                          const std::vector<std::string>& slot_names, const std::vector<std::vector<FlatRange>>& shards,
                                          const std::vector<ShardState>& states) {
  if (shapes.size() != variables.size()) return Status::InvalidArgument("one shape per variable expected");
  if (states.size() != shards.size()) return Status::InvalidArgument(fmt::format("{} shard states for {} shards", states.size(), shards.size()));
  const std::size_t num_slots = slot_names.size();
  std::vector<NamedTensor> out(variables.size());
  std::vector<std::int64_t> filled(variables.size(), 0);
  for (std::size_t i = 0; i < variables.size(); ++i) {
    std::int64_t n = 1;
    for (std::int64_t d : shapes[i]) n *= d;
    if (n != variables[i].size)
      return Status::InvalidArgument(fmt::format("variable {}: shape holds {} values, size is {}", variables[i].name, n, variables[i].size));
    out[i].name = variables[i].name;
    out[i].shape = shapes[i];
    out[i].values.resize(static_cast<std::size_t>(n));
    for (const std::string& s : slot_names) out[i].slots.push_back({s, std::vector<float>(static_cast<std::size_t>(n))});
  }
  TFD_ASSIGN_OR_RETURN(std::vector<Span> spans, SortVariables(variables));
  for (std::size_t ps = 0; ps < shards.size(); ++ps) {
    const std::int64_t size = TotalLength(shards[ps]);
    const ShardState& st = states[ps];
    if (static_cast<std::int64_t>(st.values.size()) != size || static_cast<std::int64_t>(st.slots.size()) != size * static_cast<std::int64_t>(num_slots))
      return Status::InvalidArgument(fmt::format("ps {}: state holds {} values and {} slot floats, its ranges {} values", ps,
                                                 st.values.size(), st.slots.size(), size));
    TFD_RETURN_IF_ERROR(ForEachPiece(spans, variables, shards[ps], ps, [&](std::size_t vi, std::int64_t at, std::int64_t q, std::int64_t n) {
      NamedTensor& t = out[vi];
      std::copy_n(st.values.begin() + q, n, t.values.begin() + at);
      for (std::size_t k = 0; k < num_slots; ++k)
        std::copy_n(st.slots.begin() + static_cast<std::int64_t>(k) * size + q, n, t.slots[k].values.begin() + at);
      filled[vi] += n;
    }));
  }
  for (std::size_t i = 0; i < variables.size(); ++i)
    if (filled[i] != variables[i].size)
      return Status::InvalidArgument(fmt::format("variable {}: the ranges cover {} of its {} values", variables[i].name, filled[i], variables[i].size));
  return out;
}

Result<std::vector<DataCursor>> ReshardCursors(const Checkpoint& ckpt, std::uint32_t new_workers) {
  if (new_workers == 0) return Status::InvalidArgument("re-sharding data cursors onto 0 workers");
  const std::uint32_t old = ckpt.num_workers;
  if (ckpt.cursors.size() != old || old == 0)
    return Status::InvalidArgument(fmt::format("the checkpoint has {} data cursors for {} workers", ckpt.cursors.size(), old));
  for (std::uint32_t i = 0; i < old; ++i)
    if (ckpt.cursors[i].rank != i) return Status::InvalidArgument(fmt::format("data cursor {} is for rank {}", i, ckpt.cursors[i].rank));
  if (new_workers == old) return ckpt.cursors;
  std::uint32_t epoch = UINT32_MAX;
  for (const DataCursor& d : ckpt.cursors) epoch = std::min(epoch, d.epoch);
  // Every permutation position below the lowest next position (among workers still in `epoch`)
  // has been finished by its worker: position p = base + r + j * old with j < next_r.
  std::uint64_t resume = UINT64_MAX;
  for (const DataCursor& d : ckpt.cursors) {
    if (d.epoch != epoch) continue;
    std::uint64_t pos = 0;
    if (__builtin_mul_overflow(d.next, std::uint64_t{old}, &pos) || __builtin_add_overflow(pos, d.base, &pos) ||
        __builtin_add_overflow(pos, std::uint64_t{d.rank}, &pos))
      pos = UINT64_MAX;
    resume = std::min(resume, pos);
  }
  std::vector<DataCursor> out(new_workers);
  for (std::uint32_t r = 0; r < new_workers; ++r) out[r] = {r, epoch, resume, 0};
  return out;
}

}  // namespace tfd::ckpt

