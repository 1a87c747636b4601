// The collectives through shared memory, in rounds.
//
// Each rank owns a slot, split in two halves. A round copies this rank's
// part of the data into one half of its own slot, passes a barrier point
// (sync), and then reads what it needs from every rank's half. Rounds
// alternate halves, so a fast rank may fill the next half while a slow one
// still reads the last: before a half is filled again every rank has passed
// a later sync, which it only does after reading. Vectors longer than a half
// take several rounds.
//
// Large broadcasts and all-gathers skip the slots where the group allows it
// (shm_single_copy.cpp).
//
// The reductions follow the layout Comm passes (the chunk_bounds chunks, or
// their parts of a window): each rank sums its own part over all slots in
// rank order 0..p-1, once, and everyone copies that result, so every rank
// ends with the same bits (docs/DESIGN.md section 2). Parts may differ in
// length or be empty; every rank takes as many rounds as the longest needs.
#include "shm_comm.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "reduce.h"

namespace tinyllm::dist::detail {
namespace {

void copy(const double* from, std::size_t count, double* to) {
  if (count > 0) std::memcpy(to, from, count * sizeof(double));
}

// The values of part c that the round starting at `start` covers: [begin, begin + count).
std::pair<std::size_t, std::size_t> piece_of(const std::pair<std::size_t, std::size_t>& c, std::size_t start,
                                             std::size_t piece) {
  const std::size_t begin = std::min(c.first + start, c.second);
  return {begin, std::min(c.second, begin + piece) - begin};
}

// The longest part's length: the values a round-robin over the parts must cover.
std::size_t longest(std::span<const std::pair<std::size_t, std::size_t>> layout) {
  std::size_t most = 0;
  for (auto [first, last] : layout) most = std::max(most, last - first);
  return most;
}

}  // namespace

ShmComm::ShmComm(ShmGroup& group, int rank, CommOptions options)
    : group_(group),
      rank_(rank),
      options_(options),
      half_doubles_(group.slot_doubles() / 2),
      parts_(static_cast<std::size_t>(group.size())) {
  group_.pid(rank_) = static_cast<std::int32_t>(getpid());
}

void ShmComm::sync() {
  ++phase_;
  group_.arrive(rank_, phase_);
  for (int q = 0; q < size(); ++q) {
    if (q != rank_) group_.wait_for(rank_, q, phase_, options_.timeout, current_);
  }
}

void ShmComm::exchange_headers(const CollectiveHeader& mine, std::span<CollectiveHeader> all) {
  current_ = fmt::format("{}: {} #{}", who(), collective_name(mine.op), mine.seq);
  seq_ = mine.seq;
  group_.header(rank_, mine.seq) = mine;
  sync();
  for (int q = 0; q < size(); ++q) all[q] = group_.header(q, mine.seq);
}

// Round t: root copies piece t into its half, sync, the others copy it out.
void ShmComm::transport_broadcast(std::span<double> buf, int root) {
  if (single_copy(buf.size())) return broadcast_single_copy(buf, root);
  const std::size_t piece = half_doubles_;
  for (std::size_t start = 0, t = 0; start < buf.size(); start += piece, ++t) {
    const std::size_t count = std::min(piece, buf.size() - start);
    double* shared = half(root, static_cast<int>(t % 2));
    if (rank_ == root) copy(buf.data() + start, count, shared);
    sync();
    if (rank_ != root) copy(shared, count, buf.data() + start);
  }
}

// Each half holds p pieces of `piece` values; piece q of round t is values
// [first_q + t·piece, …) of rank q's part. Copies every part's piece of the
// round starting at `start` into half h of this rank's slot, then syncs.
void ShmComm::stage_pieces(const double* in, Layout layout, std::size_t start, std::size_t piece, int h) {
  for (int q = 0; q < size(); ++q) {
    auto [begin, count] = piece_of(layout[q], start, piece);
    copy(in + begin, count, half(rank_, h) + q * piece);
  }
  sync();
}

// Round t of reduce_scatter: stage every part's piece t, sum piece rank_
// over all slots into out.
void ShmComm::transport_reduce_scatter(std::span<const double> in, std::span<double> out, ReduceOp op, Layout layout) {
  const int p = size();
  const std::size_t piece = half_doubles_ / static_cast<std::size_t>(p);
  const std::size_t rounds_cover = longest(layout);
  for (std::size_t start = 0, t = 0; start < rounds_cover; start += piece, ++t) {
    const int h = static_cast<int>(t % 2);
    stage_pieces(in.data(), layout, start, piece, h);
    for (int q = 0; q < p; ++q) parts_[q] = half(q, h) + rank_ * piece;
    auto [begin, count] = piece_of(layout[rank_], start, piece);
    reduce_in_rank_order(parts_, count, op, out.data() + (begin - layout[rank_].first));
  }
}

// Round t: copy piece t of this rank's part in, sync, copy every rank's
// piece t out to its place.
void ShmComm::transport_all_gather(std::span<const double> part, std::span<double> out, Layout layout) {
  if (single_copy(out.size())) return all_gather_single_copy(part, out, layout);
  const int p = size();
  const std::size_t piece = half_doubles_;
  const std::size_t rounds_cover = longest(layout);
  for (std::size_t start = 0, t = 0; start < rounds_cover; start += piece, ++t) {
    const int h = static_cast<int>(t % 2);
    auto [begin, count] = piece_of({0, part.size()}, start, piece);
    copy(part.data() + begin, count, half(rank_, h));
    sync();
    for (int q = 0; q < p; ++q) {
      auto [begin, count] = piece_of(layout[q], start, piece);
      copy(half(q, h), count, out.data() + begin);
    }
  }
}

// reduce_scatter and all_gather fused per round: copy in, sync, reduce this
// rank's piece in place in its own half (no other rank reads that piece of
// this slot), sync, copy every rank's reduced piece out.
void ShmComm::transport_all_reduce(std::span<double> buf, ReduceOp op, Layout layout) {
  const int p = size();
  const std::size_t piece = half_doubles_ / static_cast<std::size_t>(p);
  const std::size_t rounds_cover = longest(layout);
  for (std::size_t start = 0, t = 0; start < rounds_cover; start += piece, ++t) {
    const int h = static_cast<int>(t % 2);
    stage_pieces(buf.data(), layout, start, piece, h);
    for (int q = 0; q < p; ++q) parts_[q] = half(q, h) + rank_ * piece;
    reduce_in_rank_order(parts_, piece_of(layout[rank_], start, piece).second, op, half(rank_, h) + rank_ * piece);
    sync();
    for (int q = 0; q < p; ++q) {
      auto [begin, count] = piece_of(layout[q], start, piece);
      copy(half(q, h) + q * piece, count, buf.data() + begin);
    }
  }
}

}  // namespace tinyllm::dist::detail
