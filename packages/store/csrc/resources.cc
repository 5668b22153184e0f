#include "resources.h"

#include <algorithm>
#include <cstdio>

namespace rayfield {

namespace {

// Device count above which instanced totals are clamped (Ray caps resource
// quantities at a few ten thousand as well).
constexpr int64_t kMaxInstances = 1 << 16;

std::string FormatAmount(int64_t amount) {
  const uint64_t magnitude = amount < 0 ? 0 - static_cast<uint64_t>(amount) : static_cast<uint64_t>(amount);
  const uint64_t unit = static_cast<uint64_t>(kResourceUnit);
  std::string out = (amount < 0 ? "-" : "") + std::to_string(magnitude / unit);
  if (uint64_t frac = magnitude % unit) {
    char digits[8];
    std::snprintf(digits, sizeof(digits), "%04llu", static_cast<unsigned long long>(frac));
    std::string tail(digits);
    tail.erase(tail.find_last_not_of('0') + 1);
    out += "." + tail;
  }
  return out;
}

// Adds `delta` to s[name], dropping the entry when it reaches 0.
void AddTo(ResourceSet& s, const std::string& name, int64_t delta) {
  if (delta == 0) return;
  int64_t& slot = s[name];
  slot += delta;
  if (slot == 0) s.erase(name);
}

int64_t Get(const ResourceSet& s, const std::string& name) {
  auto it = s.find(name);
  return it == s.end() ? 0 : it->second;
}

ResourceSet Normalized(ResourceSet total) {
  for (auto it = total.begin(); it != total.end();) {
    if (IsInstancedResource(it->first) && it->second > kMaxInstances * kResourceUnit) {
      Log(2, "scheduler: " + it->first + " total clamped to " + std::to_string(kMaxInstances) + " devices");
      it->second = kMaxInstances * kResourceUnit;
    }
    it = it->second == 0 ? total.erase(it) : std::next(it);
  }
  return total;
}

}  // namespace

std::string FormatResources(const ResourceSet& r) {
  std::string out = "{";
  for (const auto& [name, amount] : r) {
    if (out.size() > 1) out += ", ";
    out += name + ": " + FormatAmount(amount);
  }
  return out + "}";
}

// GPU, and a placement group bundle's GPU (GPU_group_<i>_<pg>, GPU_group_<pg>): its
// instances are numbered within the bundle; the host maps them to the node's devices.
bool IsInstancedResource(const std::string& name) {
  return name == "GPU" || name.rfind("GPU_group_", 0) == 0;
}

ResourcePool::ResourcePool(ResourceSet total) : total_(Normalized(std::move(total))), available_(total_) {}

std::string ResourcePool::InfeasibleReason(const ResourceSet& demand) const {
  std::string problems;
  for (const auto& [name, amount] : demand) {
    std::string problem;
    if (amount < 0) {
      problem = "negative demand of " + name;
    } else if (amount > 0 && !total_.count(name)) {
      problem = "resource '" + name + "' is not defined on this node";
    } else if (amount > Get(total_, name)) {
      problem = "needs " + name + " " + FormatAmount(amount) + " > " + FormatAmount(Get(total_, name));
    }
    if (problem.empty()) continue;
    problems += (problems.empty() ? "" : "; ") + problem;
  }
  if (problems.empty()) return {};
  return "task demands " + FormatResources(demand) + " but the node's total resources are " +
         FormatResources(total_) + ": " + problems;
}

bool ResourcePool::Fits(const ResourceSet& demand) const {
  for (const auto& [name, amount] : demand) {
    if (amount > Get(available_, name)) return false;
  }
  std::vector<ResourceGrant> grants;
  for (const auto& [name, amount] : demand) {
    if (IsInstancedResource(name) && !PlaceInstances(name, amount, &grants)) return false;
  }
  return true;
}

Acquisition ResourcePool::Acquire(const ResourceSet& demand) {
  Acquisition held;
  held.amounts = demand;
  for (const auto& [name, amount] : demand) {
    AddTo(available_, name, -amount);
    const bool labelled = name == "CPU";
    if ((!IsInstancedResource(name) && !labelled) || amount <= 0) continue;
    size_t first = held.instances.size();
    if (!PlaceInstances(name, amount, &held.instances) && labelled) {
      held.instances.resize(first);
      PlaceLoosely(name, amount, &held.instances);
    }
    std::vector<int64_t>& used = used_[name];
    for (size_t i = first; i < held.instances.size(); ++i) {
      const ResourceGrant& g = held.instances[i];
      if (used.size() <= g.index) used.resize(g.index + 1, 0);
      used[g.index] += g.amount;
    }
  }
  return held;
}

void ResourcePool::Release(const Acquisition& held) {
  for (const auto& [name, amount] : held.amounts) {
    if (held.cpu_lent && name == "CPU") continue;
    AddTo(available_, name, amount);
  }
  for (const ResourceGrant& g : held.instances) {
    std::vector<int64_t>& used = used_[g.name];
    used[g.index] -= g.amount;
    while (!used.empty() && used.back() == 0) used.pop_back();
  }
}

void ResourcePool::Lend(Acquisition& held) {
  if (held.cpu_lent) return;
  held.cpu_lent = true;
  AddTo(available_, "CPU", Get(held.amounts, "CPU"));
}

void ResourcePool::Reclaim(Acquisition& held) {
  if (!held.cpu_lent) return;
  held.cpu_lent = false;
  AddTo(available_, "CPU", -Get(held.amounts, "CPU"));
}

void ResourcePool::SetTotal(ResourceSet total) {
  total = Normalized(std::move(total));
  ResourceSet available;
  for (const auto& [name, amount] : total) AddTo(available, name, amount);
  for (const auto& [name, amount] : total_) AddTo(available, name, -(amount - Get(available_, name)));
  for (const auto& [name, amount] : available_) {
    if (!total_.count(name)) AddTo(available, name, amount);  // held past an old total
  }
  total_ = std::move(total);
  available_ = std::move(available);
}

std::vector<int64_t> ResourcePool::UsedPerDevice(const std::string& name) const {
  std::vector<int64_t> out(NumInstances(name));
  for (size_t i = 0; i < out.size(); ++i) out[i] = Used(name, i);
  return out;
}

int64_t ResourcePool::Capacity(const std::string& name, size_t index) const {
  int64_t left = Get(total_, name) - static_cast<int64_t>(index) * kResourceUnit;
  return std::clamp<int64_t>(left, 0, kResourceUnit);
}

size_t ResourcePool::NumInstances(const std::string& name) const {
  size_t devices = static_cast<size_t>((Get(total_, name) + kResourceUnit - 1) / kResourceUnit);
  auto it = used_.find(name);
  return it == used_.end() ? devices : std::max(devices, it->second.size());
}

int64_t ResourcePool::Used(const std::string& name, size_t index) const {
  auto it = used_.find(name);
  return it == used_.end() || index >= it->second.size() ? 0 : it->second[index];
}

// Appends labels for `amount` of `name` that need not be free: whole units on the least
// used devices, a fraction on the one with the most room (lowest index on ties).
void ResourcePool::PlaceLoosely(const std::string& name, int64_t amount,
                                std::vector<ResourceGrant>* grants) const {
  const size_t n = std::max<size_t>(1, NumInstances(name));
  std::vector<int64_t> used(n);
  for (size_t i = 0; i < n; ++i) used[i] = Used(name, i);
  for (int64_t left = amount; left > 0;) {
    const int64_t part = std::min<int64_t>(left, kResourceUnit);
    size_t best = 0;
    for (size_t i = 1; i < n; ++i) {
      if (used[i] < used[best]) best = i;
    }
    grants->push_back({name, static_cast<uint32_t>(best), part});
    used[best] += part;
    left -= part;
  }
}

// Appends grants for `amount` of `name`: whole units on entirely free devices
// (lowest index first), a fractional remainder on the fullest device that
// still has room for it. Returns false, leaving `grants` unspecified, if the
// devices cannot hold it now.
bool ResourcePool::PlaceInstances(const std::string& name, int64_t amount,
                                  std::vector<ResourceGrant>* grants) const {
  const size_t n = NumInstances(name);
  int64_t whole = amount / kResourceUnit;
  const int64_t frac = amount % kResourceUnit;
  std::vector<bool> taken(n, false);
  for (size_t i = 0; i < n && whole > 0; ++i) {
    if (Capacity(name, i) != kResourceUnit || Used(name, i) != 0) continue;
    grants->push_back({name, static_cast<uint32_t>(i), kResourceUnit});
    taken[i] = true;
    --whole;
  }
  if (whole > 0) return false;
  if (frac == 0) return true;
  size_t best = n;
  int64_t best_room = 0;
  for (size_t i = 0; i < n; ++i) {
    int64_t room = Capacity(name, i) - Used(name, i);
    if (taken[i] || room < frac || (best < n && room >= best_room)) continue;
    best = i;
    best_room = room;
  }
  if (best == n) return false;
  grants->push_back({name, static_cast<uint32_t>(best), frac});
  return true;
}

}  // namespace rayfield
