// Fixed-point resource accounting of one node, used by the scheduler.
//
// A ResourcePool knows the node's totals and what is available now. Instanced
// resources (GPU) are also tracked per device index: a whole unit of demand
// takes a device that is entirely free, a fractional remainder packs onto the
// device with the least room that still fits it (best fit), so fractional
// tasks share devices and leave whole ones free. With a fractional total
// (e.g. GPU 1.5) the last device has the fractional capacity.
//
// CPUs are labelled the same way (classic Ray's `get_resource_ids()` gives a task
// its CPU ids), but the labels never hold a task back: CPU is scheduled by amount, and
// when no free labels fit (fragmentation, or CPU lent by a blocked worker) the
// task's CPUs get the least used labels instead.
#pragma once

#include <string>
#include <vector>

#include "scheduler.h"

namespace rayfield {

// What one task, or an actor for its lifetime, holds.
struct Acquisition {
  ResourceSet amounts;
  std::vector<ResourceGrant> instances;
  bool cpu_lent = false;  // its CPU is lent back while its worker is blocked
};

class ResourcePool {
 public:
  explicit ResourcePool(ResourceSet total);

  const ResourceSet& total() const { return total_; }
  // May hold negative amounts after a blocked worker took its CPU back.
  const ResourceSet& available() const { return available_; }

  // Empty if `demand` fits the totals of an idle node, else a human reason
  // naming the demand and the totals.
  std::string InfeasibleReason(const ResourceSet& demand) const;
  // Whether `demand` can be acquired now (amounts and device instances).
  bool Fits(const ResourceSet& demand) const;
  // Takes `demand`; requires Fits(demand).
  Acquisition Acquire(const ResourceSet& demand);
  // Gives back what `held` holds (not its CPU while it is lent).
  void Release(const Acquisition& held);
  // Lends held CPU back to the pool while the holder is blocked.
  void Lend(Acquisition& held);
  // Takes lent CPU back, even if that oversubscribes the node.
  void Reclaim(Acquisition& held);
  // New totals; what is held stays held (availability may go negative).
  void SetTotal(ResourceSet total);
  // An instanced resource's use per device index, held past the total included.
  std::vector<int64_t> UsedPerDevice(const std::string& name) const;

 private:
  int64_t Capacity(const std::string& name, size_t index) const;
  size_t NumInstances(const std::string& name) const;
  int64_t Used(const std::string& name, size_t index) const;
  bool PlaceInstances(const std::string& name, int64_t amount, std::vector<ResourceGrant>* grants) const;
  void PlaceLoosely(const std::string& name, int64_t amount, std::vector<ResourceGrant>* grants) const;

  ResourceSet total_, available_;
  std::map<std::string, std::vector<int64_t>> used_;  // instanced: amount used per device
};

}  // namespace rayfield
