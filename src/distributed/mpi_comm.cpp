// MpiComm's transport: headers and the reduce-scatter by point-to-point
// messages, broadcast and all-gather by MPI's non-blocking collectives, every
// wait a poll of MPI_Test against the timeout. all_reduce is a reduce-scatter
// of the chunk_bounds chunks, each summed once by its owner in rank order,
// then an all-gather, so every rank (and backend) has the same bits, which
// MPI_Allreduce does not promise. Reference: MPI 3.1, sections 3.7, 5.12, 6.4.
#include "tinyllm/distributed/mpi_comm.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string_view>
#include <thread>
#include <type_traits>

#include "reduce.h"
#include "tinyllm/distributed/errors.h"

namespace tinyllm::dist {
namespace {

using Clock = std::chrono::steady_clock;

// Our duplicated communicator carries headers and the reduce-scatter's
// terms; their own tags keep a receive for one from matching the other.
constexpr int kHeaderTag = 1;
constexpr int kTermTag = 2;
static_assert(std::is_trivially_copyable_v<CollectiveHeader>, "headers travel as raw bytes");
constexpr int kHeaderBytes = sizeof(CollectiveHeader);

// A wait spins first (a collective on shared memory takes microseconds),
// then yields the core, then sleeps, so eight ranks oversubscribed on two
// cores still let the rank they wait for run.
void back_off(long spins) {
  if (spins < 4'096) return;
  if (spins < 65'536) {
    sched_yield();
  } else {
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

// Whether [x, x + nx) and [y, y + ny) share a value (std::less orders any two pointers).
bool overlaps(const double* x, std::size_t nx, const double* y, std::size_t ny) {
  if (nx == 0 || ny == 0) return false;
  std::less<const double*> before;
  return before(x, y + ny) && before(y, x + nx);
}

}  // namespace

bool launched_by_mpirun() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"}) {
    if (std::getenv(name) != nullptr) return true;
  }
  return false;
}

MpiSession::MpiSession(int* argc, char*** argv) : unwinding_(std::uncaught_exceptions()) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) return;
  int provided = 0;
  if (MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS) {
    throw CommError("MpiSession: MPI_Init_thread failed");
  }
  owns_ = true;
}

MpiSession::~MpiSession() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (owns_ && !finalized && std::uncaught_exceptions() == unwinding_) MPI_Finalize();
}

void abort_mpi_job(int code) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, code);
}

MpiComm::MpiComm(MPI_Comm comm, CommOptions options, std::size_t max_count) : options_(options), max_count_(max_count) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) throw std::invalid_argument("MpiComm: MPI must be initialised first (construct an MpiSession)");
  if (comm == MPI_COMM_NULL) throw std::invalid_argument("MpiComm: communicator must not be MPI_COMM_NULL");
  check_options(options, "MpiComm");
  if (max_count < 1 || max_count > kMaxCount) {
    throw std::invalid_argument(fmt::format("MpiComm: max_count must be in [1, {}] (got {})", kMaxCount, max_count));
  }
  MPI_Comm_rank(comm, &rank_);
  MPI_Comm_size(comm, &size_);
  int level = MPI_THREAD_SINGLE;
  MPI_Query_thread(&level);
  serialized_ = level >= MPI_THREAD_SERIALIZED;

  // A timed-out MPI_Comm_idup may still complete later and write its handle,
  // so it writes into storage that outlives this constructor's failure.
  auto duplicate = std::make_unique<MPI_Comm>(MPI_COMM_NULL);
  MPI_Request request = MPI_REQUEST_NULL;
  if (MPI_Comm_idup(comm, duplicate.get(), &request) != MPI_SUCCESS) {
    throw CommError(fmt::format("{}: MpiComm: MPI_Comm_idup failed", who()));
  }
  if (!poll({&request, 1})) {
    duplicate.release();
    throw CommError(
        fmt::format("{}: MpiComm: duplicating the communicator timed out after {} ms (every rank must "
                    "construct its MpiComm)",
                    who(), options_.timeout.count()));
  }
  comm_ = *duplicate;
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  requests_.assign(2 * static_cast<std::size_t>(size_), MPI_REQUEST_NULL);
  terms_.resize(static_cast<std::size_t>(size_));
  counts_.resize(static_cast<std::size_t>(size_));
  displs_.resize(static_cast<std::size_t>(size_));
}

MpiComm::~MpiComm() {
  // After a failure, messages of the abandoned collective may still arrive
  // on comm_. Open MPI reuses a communicator's id only once every rank has
  // freed it, so keeping it here keeps them from matching a later one.
  // They may also still write into received_ or read scratch_, so those
  // buffers are left to them, never freed.
  if (broken_) {
    static_cast<void>(new std::vector<double>(std::move(received_)));
    static_cast<void>(new std::vector<double>(std::move(scratch_)));
  }
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!broken_ && !finalized) MPI_Comm_free(&comm_);
}

std::string MpiComm::current() const { return fmt::format("{} #{}", collective_name(current_.op), current_.seq); }

void MpiComm::check(int status, const char* call) {
  if (status == MPI_SUCCESS) return;
  broken_ = true;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(status, text, &length);
  throw CommError(fmt::format("{}: {} failed in {}: {}", who(), current(), call, std::string_view(text, length)));
}

// Tests every request until all are complete (true) or the timeout passes
// (false, the unfinished ones left active). MPI_Test also drives the
// progress of non-blocking collectives, so the poll is what moves the data.
bool MpiComm::poll(std::span<MPI_Request> requests) const {
  const auto deadline = Clock::now() + options_.timeout;
  for (long spins = 0;; ++spins) {
    bool done = true;
    for (MPI_Request& request : requests) {
      int complete = 1;
      if (request != MPI_REQUEST_NULL) MPI_Test(&request, &complete, MPI_STATUS_IGNORE);
      done = done && complete;
    }
    if (done) return true;
    if (Clock::now() >= deadline) return false;
    back_off(spins);
  }
}

// "waiting for rank 2" or "waiting for ranks 1, 2": the peers whose message
// to this rank is still open in the per-peer requests_ (receives [0, p),
// sends [p, 2p)), else those yet to take this rank's; empty if none is.
std::string MpiComm::unjoined() const {
  const auto p = static_cast<std::size_t>(size_);
  for (std::size_t first : {std::size_t{0}, p}) {
    std::vector<std::size_t> ranks;
    for (std::size_t q = 0; q < p; ++q) {
      if (requests_[first + q] != MPI_REQUEST_NULL) ranks.push_back(q);
    }
    if (ranks.size() == 1) return fmt::format("waiting for rank {}", ranks[0]);
    if (!ranks.empty()) return fmt::format("waiting for ranks {}", fmt::join(ranks, ", "));
  }
  return {};
}

// A collective request cannot be cancelled, nor a receive already matched:
// on a timeout they stay in flight and the communicator is kept (broken_)
// until the job ends. The per-peer requests_ name the ranks that have not
// joined; a collective's one request cannot say which they are.
void MpiComm::wait(std::span<MPI_Request> requests, const char* phase) {
  if (poll(requests)) return;
  broken_ = true;
  const std::string peers = requests.data() == requests_.data() ? unjoined() : std::string();
  throw CommError(fmt::format("{}: {} timed out after {} ms in {} {}", who(), current(), options_.timeout.count(),
                              phase,
                              peers.empty() ? "(MPI does not say which rank: one died or stopped calling)" : peers));
}

// Header exchange:
//   1. post a receive for every peer's header into all[q];
//   2. send this rank's header to every peer;
//   3. poll them all.
// Point-to-point rather than an all-gather, so that at the deadline this
// rank can name the first peer whose header never came. Messages between
// two ranks arrive in the order sent, so the headers of successive
// collectives cannot swap.
void MpiComm::exchange_headers(const CollectiveHeader& mine, std::span<CollectiveHeader> all) {
  current_ = outgoing_ = all[rank_] = mine;
  const auto p = static_cast<std::size_t>(size_);
  for (int q = 0; q < size_; ++q) {
    if (q == rank_) continue;
    check(MPI_Irecv(&all[q], kHeaderBytes, MPI_BYTE, q, kHeaderTag, comm_, &requests_[q]), "MPI_Irecv");
  }
  for (int q = 0; q < size_; ++q) {
    if (q == rank_) continue;
    check(MPI_Isend(&outgoing_, kHeaderBytes, MPI_BYTE, q, kHeaderTag, comm_, &requests_[p + q]), "MPI_Isend");
  }
  if (poll(requests_)) return;

  // The deadline passed. Receives into `all` (the caller's) are cancelled,
  // which completes them at once; a header is one eager message, so a send
  // still open here is left to finish from outgoing_.
  broken_ = true;
  std::string peers = unjoined();
  if (std::none_of(requests_.begin(), requests_.begin() + p, [](MPI_Request r) { return r != MPI_REQUEST_NULL; })) {
    peers = "sending its header";
  }
  for (std::size_t q = 0; q < p; ++q) {
    if (requests_[q] != MPI_REQUEST_NULL) {
      MPI_Cancel(&requests_[q]);
      MPI_Wait(&requests_[q], MPI_STATUS_IGNORE);
    }
    if (requests_[p + q] != MPI_REQUEST_NULL) MPI_Request_free(&requests_[p + q]);
  }
  throw CommError(fmt::format("{}: {} timed out after {} ms {}", who(), current(), options_.timeout.count(), peers));
}

// Vectors longer than max_count_ go in pieces [s, e). Rank q's part of a
// piece is where the piece overlaps q's part of the layout (its chunk_bounds
// chunk, or its part of a window): counts_[q] values at displs_[q] from s.
// A vector of one piece is laid out exactly by the layout.
void MpiComm::lay_out_piece(Layout layout, std::size_t s, std::size_t e) {
  for (int q = 0; q < size_; ++q) {
    auto [a, b] = layout[q];
    const std::size_t lo = std::clamp(a, s, e), hi = std::clamp(b, s, e);
    counts_[q] = static_cast<int>(hi - lo);
    displs_[q] = static_cast<int>(lo - s);
    if (q == rank_) own_offset_ = hi > lo ? lo - a : 0;
  }
}

// The buffers grow to the longest call and stay: fresh memory costs a page
// fault per 4 KiB at first touch, as much as the copy itself. Growing
// discards the contents (clear first), so nothing is copied.
std::span<double> MpiComm::scratch(std::size_t n) {
  if (scratch_.size() < n) {
    scratch_.clear();
    scratch_.resize(n);
  }
  return {scratch_.data(), n};
}

std::span<double> MpiComm::received(std::size_t n) {
  if (received_.size() < n) {
    received_.clear();
    received_.resize(n);
  }
  return {received_.data(), n};
}

// part (counts_[rank_] values) becomes this rank's part of the sum over
// ranks of the piece at `in`, divided by p for Mean, once, on its owner.
// Point to point, since Open MPI's MPI_Ireduce_scatter allocates and first
// touches fresh buffers on every call (90 ms at 16 MiB here) and sums in no
// promised order:
//   1. post a receive from every peer q of q's values of this rank's part,
//      into q's slot of received_ (slots in rank order, this rank's skipped);
//   2. send every peer q this rank's values of q's part, straight from `in`;
//   3. poll them all;
//   4. sum the terms in rank order: this rank's own values in `in`, the
//      peers' in their slots.
// part is disjoint from `in` or exactly this rank's values in it; the sends
// have completed before it is written.
void MpiComm::reduce_scatter_piece(const double* in, double* part, ReduceOp op) {
  const auto p = static_cast<std::size_t>(size_);
  const int count = counts_[rank_];
  double* slots = received((p - 1) * static_cast<std::size_t>(count)).data();
  for (int q = 0; q < size_; ++q) {
    if (q == rank_) {
      terms_[q] = in + displs_[q];
      continue;
    }
    double* slot = slots + static_cast<std::size_t>(q < rank_ ? q : q - 1) * static_cast<std::size_t>(count);
    terms_[q] = slot;
    if (count > 0) check(MPI_Irecv(slot, count, MPI_DOUBLE, q, kTermTag, comm_, &requests_[q]), "MPI_Irecv");
  }
  for (int q = 0; q < size_; ++q) {
    if (q == rank_ || counts_[q] == 0) continue;
    check(MPI_Isend(in + displs_[q], counts_[q], MPI_DOUBLE, q, kTermTag, comm_, &requests_[p + q]), "MPI_Isend");
  }
  wait(requests_, "the reduce-scatter");
  detail::reduce_in_rank_order(terms_, static_cast<std::size_t>(count), op, part);
}

// Every rank's part lands in the piece at `out`; `part` may be
// MPI_IN_PLACE when this rank's part already sits there.
void MpiComm::all_gather_piece(const double* part, double* out) {
  MPI_Request request = MPI_REQUEST_NULL;
  check(MPI_Iallgatherv(part, counts_[rank_], MPI_DOUBLE, out, counts_.data(), displs_.data(), MPI_DOUBLE, comm_,
                        &request),
        "MPI_Iallgatherv");
  wait({&request, 1}, "the all-gather");
}

void MpiComm::transport_broadcast(std::span<double> buf, int root) {
  for (std::size_t s = 0; s < buf.size(); s += max_count_) {
    const auto count = static_cast<int>(std::min(max_count_, buf.size() - s));
    MPI_Request request = MPI_REQUEST_NULL;
    check(MPI_Ibcast(buf.data() + s, count, MPI_DOUBLE, root, comm_, &request), "MPI_Ibcast");
    wait({&request, 1}, "the broadcast");
  }
}

// all_reduce, piece by piece:
//   1. reduce-scatter: this rank's part of the sum (or mean) replaces its
//      own values in buf;
//   2. all-gather: every part is copied into every rank's buf (in place).
void MpiComm::transport_all_reduce(std::span<double> buf, ReduceOp op, Layout layout) {
  const std::size_t n = buf.size();
  for (std::size_t s = 0; s < n; s += max_count_) {
    lay_out_piece(layout, s, std::min(n, s + max_count_));
    double* piece = buf.data() + s;
    reduce_scatter_piece(piece, piece + displs_[rank_], op);
    all_gather_piece(static_cast<const double*>(MPI_IN_PLACE), piece);
  }
}

// out exactly over this rank's part of in is reduced in place, piece by
// piece. An out overlapping in anywhere else would overwrite values of
// pieces still to be sent, so the part is reduced into scratch and copied
// to out once every piece is done.
void MpiComm::transport_reduce_scatter(std::span<const double> in, std::span<double> out, ReduceOp op, Layout layout) {
  const std::size_t n = in.size();
  const std::size_t a = layout[rank_].first;
  const bool in_place = out.data() == in.data() + a;
  const bool overlap = !in_place && overlaps(in.data(), n, out.data(), out.size());
  std::span<double> chunk = overlap ? scratch(out.size()) : out;
  for (std::size_t s = 0; s < n; s += max_count_) {
    lay_out_piece(layout, s, std::min(n, s + max_count_));
    reduce_scatter_piece(in.data() + s, chunk.data() + own_offset_, op);
  }
  if (overlap) std::copy(chunk.begin(), chunk.end(), out.begin());
}

// A part already at its place in out is gathered in place (MPI_IN_PLACE);
// one overlapping out elsewhere is copied out of the way first.
void MpiComm::transport_all_gather(std::span<const double> chunk, std::span<double> out, Layout layout) {
  const std::size_t n = out.size();
  const std::size_t a = layout[rank_].first;
  const bool in_place = !chunk.empty() && chunk.data() == out.data() + a;
  const bool overlap = overlaps(chunk.data(), chunk.size(), out.data(), n);
  const double* source = chunk.data();
  if (overlap && !in_place) {
    std::span<double> copy = scratch(chunk.size());
    std::copy(chunk.begin(), chunk.end(), copy.begin());
    source = copy.data();
  }
  for (std::size_t s = 0; s < n; s += max_count_) {
    lay_out_piece(layout, s, std::min(n, s + max_count_));
    all_gather_piece(in_place ? static_cast<const double*>(MPI_IN_PLACE) : source + own_offset_, out.data() + s);
  }
}

}  // namespace tinyllm::dist
