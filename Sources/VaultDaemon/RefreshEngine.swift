import Dispatch
import Synchronization
import VaultCrypto
import VaultModel
import VaultOAuth
import VaultStore
import VaultSystem
#if canImport(Glibc)
@preconcurrency import Glibc
#endif

/// Keeps tokens fresh (PRODUCT.md section 4): one wall-clock timer for all
/// items (a min-heap of due times under a `timerfd`, so an idle daemon
/// wakes only for due refreshes), proactive refresh at the margin with
/// jitter, exponential backoff with jitter that honours `Retry-After`,
/// single flight per item, rotation committed before serving, and
/// `needs-reauth` on `invalid_grant`/`invalid_client`.
///
/// Thread safety: the schedule and the flights are behind one mutex; the
/// scheduler runs on its own thread; refreshes run on a small pool of
/// threads of their own (blocking HTTP and SQLite: never on Swift's
/// cooperative pool, and never on Dispatch's, which URLSession needs free).
public final class RefreshEngine: Sendable {
    /// What a refresh did.
    public enum Outcome: Sendable {
        case refreshed
        /// Another refresh finished after the caller last looked: nothing was sent.
        case alreadyFresh
        case failed(VaultError)
    }

    /// One refresh in progress; any number of callers wait for it.
    final class Flight: Sendable {
        let done = DispatchGroup()
        let outcome = Mutex<Outcome?>(nil)
        init() { done.enter() }
    }

    struct Entry {
        var due: Double
        var key: ItemKey
        var generation: UInt64
    }

    struct Schedule {
        var heap: [Entry] = []
        var current: [ItemKey: UInt64] = [:]
        var generation: UInt64 = 0
        var failures: [ItemKey: Int] = [:]
        /// When a failed item may be tried again (backoff, `Retry-After`).
        var retryAt: [ItemKey: Double] = [:]
        var flights: [ItemKey: Flight] = [:]
        var running = true
    }

    let vault: Vault
    let providers: ProviderDirectory
    let client: TokenEndpointClient
    let logger: Logger
    let notifier: Notifier
    private let schedule = Mutex(Schedule())
    private let timer: WallClockTimer
    /// Refreshes waiting for a worker thread, oldest first.
    private struct Jobs {
        var queue: [(key: ItemKey, flight: Flight)] = []
        var head = 0
    }
    private let jobs = Mutex(Jobs())
    private let jobsReady = DispatchSemaphore(value: 0)
    /// Refreshes that run at once.
    static let workerCount = 8
    /// Refreshes started, for `status` and benchmarks.
    public let requestsSent = Atomic<Int>(0)
    /// Timer wake-ups, for the idle benchmark.
    public let wakeups = Atomic<Int>(0)

    public init(vault: Vault, providers: ProviderDirectory, client: TokenEndpointClient, logger: Logger, notifier: Notifier) throws(SystemError) {
        self.vault = vault
        self.providers = providers
        self.client = client
        self.logger = logger
        self.notifier = notifier
        timer = try WallClockTimer()
    }

    /// The key under which a provider's client secret is kept.
    public static func clientSecretKey(_ provider: String) -> ItemKey {
        ItemKey(provider: provider, account: "client", kind: .clientSecret)
    }

    // MARK: - Scheduler

    /// Starts the scheduler thread and the worker threads, and schedules every item.
    ///
    /// The workers are POSIX threads, not a Dispatch queue: a refresh blocks
    /// its thread until URLSession answers, and URLSession delivers answers
    /// on Dispatch's global pool. With refreshes blocking that pool (2
    /// threads on 2 cores), each answer waited for Linux libdispatch to add
    /// a thread, about once a second: 200 due refreshes took minutes.
    public func start() throws(SystemError) {
        for _ in 0..<Self.workerCount {
            try spawnThread(stackSize: 1 << 20) { [self] in work() }
        }
        try spawnThread { [self] in run() }
        vault.observeLockState { [weak self] _ in self?.rescheduleAll() }
        rescheduleAll()
    }

    /// A worker thread: runs queued refreshes, one at a time, forever.
    private func work() {
        while true {
            jobsReady.wait()
            let job = jobs.withLock { j -> (key: ItemKey, flight: Flight)? in
                guard j.head < j.queue.count else { return nil }
                let job = j.queue[j.head]
                j.head += 1
                if j.head == j.queue.count {
                    j.queue.removeAll(keepingCapacity: true)
                    j.head = 0
                } else if j.head >= 1024 && j.head * 2 >= j.queue.count {
                    j.queue.removeFirst(j.head)
                    j.head = 0
                }
                return job
            }
            guard let job else { continue }
            finish(job.key, job.flight, perform(job.key))
        }
    }

    /// Stops the scheduler (refreshes in flight finish).
    public func stop() {
        schedule.withLock { $0.running = false }
        timer.wake()
    }

    private func run() {
        while true {
            let next = schedule.withLock { s -> Double?? in
                guard s.running else { return .none }
                while let top = s.heap.first, s.current[top.key] != top.generation { popMin(&s.heap) }
                return .some(s.heap.first?.due)
            }
            guard let next else { return }
            // The timer runs on the system clock; `WallClock.offset` is the test seam's jump.
            timer.arm(at: next.map { $0 - WallClock.offset })
            switch timer.wait() {
            case .woken: continue
            case .clockChanged:
                logger.info("the wall clock changed; re-evaluating refresh deadlines")
                continue
            case .fired: break
            }
            wakeups.add(1, ordering: .relaxed)
            let now = WallClock.now()
            let due = schedule.withLock { s -> [ItemKey] in
                var keys: [ItemKey] = []
                while let top = s.heap.first, top.due <= now {
                    popMin(&s.heap)
                    if s.current[top.key] == top.generation {
                        s.current[top.key] = nil
                        keys.append(top.key)
                    }
                }
                return keys
            }
            for key in due { _ = begin(key, seenUpdatedAt: nil) }
        }
    }

    /// The wall clock jumped (the test seam; a real jump wakes the timer by itself).
    public func clockChanged() {
        logger.info("the wall clock changed; re-evaluating refresh deadlines")
        timer.wake()
    }

    /// Re-evaluates `key`'s place in the schedule after it changed.
    public func itemChanged(_ key: ItemKey) {
        schedule.withLock { $0.failures[key] = nil; $0.retryAt[key] = nil }
        reschedule(key)
    }

    /// Re-evaluates every item (start, unlock, lock, config reload).
    public func rescheduleAll() {
        for key in vault.keys where key.kind == .token { reschedule(key) }
    }

    private func reschedule(_ key: ItemKey) {
        guard let item = vault.item(key), key.kind == .token, item.status == .ok, let expiresAt = item.expiresAt,
              providers.refreshNote(key.provider) == nil, vault.isReadable(key) else {
            // Dropping an entry never makes the timer due sooner: no wake-up needed.
            schedule.withLock { _ = $0.current.removeValue(forKey: key) }
            return
        }
        let inBackoff = schedule.withLock { $0.failures[key] != nil && $0.current[key] != nil }
        if inBackoff { return }
        let due = providers.refreshDue(provider: key.provider, expiresAt: expiresAt, obtainedAt: item.updatedAt,
                                       jitter: Double(randomUniform(1_000_000)) / 1_000_000)
        set(key, due: due)
    }

    private func set(_ key: ItemKey, due: Double) {
        let wake = schedule.withLock { s -> Bool in
            s.generation += 1
            s.current[key] = s.generation
            let earliest = s.heap.first?.due
            push(&s.heap, Entry(due: due, key: key, generation: s.generation))
            if s.heap.count > 2 * s.current.count + 64 {
                s.heap = s.heap.filter { s.current[$0.key] == $0.generation }
                heapify(&s.heap)
            }
            return earliest.map { due < $0 } ?? true
        }
        if wake { timer.wake() }
    }

    /// Waits until no refresh is running (at shutdown, so a rotated refresh
    /// token is committed before the process exits), at most `timeoutMs`.
    public func waitForFlights(timeoutMs: Int) -> Bool {
        var waited = 0
        while schedule.withLock({ !$0.flights.isEmpty }) {
            if waited >= timeoutMs { return false }
            usleep(10_000)
            waited += 10
        }
        return true
    }

    /// Whether a refresh of `key` is running now (`refreshing` in `list`).
    public func isRefreshing(_ key: ItemKey) -> Bool { schedule.withLock { $0.flights[key] != nil } }

    /// The next scheduled refresh of `key`, if any.
    public func nextRefresh(_ key: ItemKey) -> Double? {
        schedule.withLock { s in
            guard let g = s.current[key] else { return nil }
            return s.heap.first { $0.key == key && $0.generation == g }?.due
        }
    }

    // MARK: - Single flight

    /// Refreshes `key` now, or joins the refresh already running, and waits
    /// at most `wait` seconds. `seenUpdatedAt` is the item's `updatedAt`
    /// the caller saw: if the item changed since, nothing is sent.
    /// With `honourBackoff`, an item whose last refresh failed is not tried
    /// before its retry time (backoff, `Retry-After`): clients asking for a
    /// token must not turn the backoff into a request per client request.
    public func refresh(_ key: ItemKey, seenUpdatedAt: Double?, wait: Double, honourBackoff: Bool = false) -> Outcome {
        if honourBackoff, let at = schedule.withLock({ s in s.flights[key] == nil ? s.retryAt[key] : nil }) {
            let left = at - WallClock.now()
            if left > 0 {
                return .failed(VaultError(.temporary, "the last refresh of \(key) failed; the next attempt is in \(Int(left.rounded(.up))) s"))
            }
        }
        guard let flight = begin(key, seenUpdatedAt: seenUpdatedAt) else { return .alreadyFresh }
        if flight.done.wait(timeout: .now() + wait) == .timedOut {
            return .failed(VaultError(.temporary, "the refresh of \(key) is still running after \(Int(wait)) s"))
        }
        return flight.outcome.withLock { $0 } ?? .failed(VaultError(.failure, "refresh of \(key) ended without a result"))
    }

    private func begin(_ key: ItemKey, seenUpdatedAt: Double?) -> Flight? {
        let (flight, started) = schedule.withLock { s -> (Flight?, Bool) in
            if let f = s.flights[key] { return (f, false) }
            if let seen = seenUpdatedAt, let item = vault.item(key), item.updatedAt > seen { return (nil, false) }
            let f = Flight()
            s.flights[key] = f
            return (f, true)
        }
        if let flight, started {
            jobs.withLock { $0.queue.append((key, flight)) }
            jobsReady.signal()
        }
        return flight
    }

    private func finish(_ key: ItemKey, _ flight: Flight, _ outcome: Outcome) {
        schedule.withLock { s in
            s.flights[key] = nil
            if case .refreshed = outcome { s.failures[key] = nil; s.retryAt[key] = nil }
        }
        flight.outcome.withLock { $0 = outcome }
        flight.done.leave()
        if case .refreshed = outcome { reschedule(key) }
    }

    // MARK: - One refresh

    private func perform(_ key: ItemKey) -> Outcome {
        guard let item = vault.item(key) else { return .failed(VaultError(.notFound, "no item \(key)")) }
        let profile: ProviderProfile
        do { profile = try providers.profile(key.provider) } catch {
            return failed(key, error)
        }
        // Copy out what the request needs; the plaintext buffer is wiped when the closure returns.
        let refreshToken: String?
        do {
            refreshToken = try vault.withSecrets(key) { (_, plain) throws(VaultError) -> String? in
                (try? JSON.parse(plain))?["refresh_token"]?.stringValue
            }
        } catch {
            return .failed(error)
        }
        let clientSecret: String?
        do {
            clientSecret = try vault.withSecrets(Self.clientSecretKey(key.provider)) { (_, plain) throws(VaultError) -> String? in
                String(decoding: plain, as: UTF8.self)
            }
        } catch where error.code == .notFound {
            clientSecret = nil
        } catch {
            return .failed(VaultError(error.code, "the client secret of \(key.provider) cannot be read now: \(error.message)"))
        }
        requestsSent.add(1, ordering: .relaxed)
        let response: TokenResponse
        do throws(EndpointFailure) {
            if profile.grant == "client_credentials" {
                response = try client.clientCredentials(profile, clientSecret: clientSecret)
            } else {
                guard let refreshToken else {
                    throw EndpointFailure.needsReauth("\(key) has no refresh token")
                }
                do {
                    response = try client.refresh(profile, refreshToken: refreshToken, clientSecret: clientSecret)
                } catch .transient(let message, _, responseLost: true) {
                    // The server may have used the refresh token already: ask once more with the same one.
                    logger.warning("refresh of \(key): \(message); retrying once with the same refresh token")
                    requestsSent.add(1, ordering: .relaxed)
                    response = try client.refresh(profile, refreshToken: refreshToken, clientSecret: clientSecret)
                }
            }
        } catch {
            return failed(key, error)
        }
        // Rotation: the new refresh token (or the old one, if none came) is committed before anything is served.
        let lifetime = response.expiresIn ?? providers.current.providers[key.provider]?.assumeLifetimeSeconds
        do {
            try vault.storeTokenResponse(key, mode: item.mode, response, assumeLifetime: lifetime, keepRefreshToken: refreshToken)
        } catch {
            logger.error("refresh of \(key) succeeded but could not be saved: \(error.message)")
            return .failed(error)
        }
        logger.info("refreshed \(key)\(lifetime.map { ", valid for \(Int($0)) s" } ?? "")")
        return .refreshed
    }

    /// Handles a failed refresh: backoff, or needs-reauth, and the outcome.
    private func failed(_ key: ItemKey, _ failure: EndpointFailure) -> Outcome {
        switch failure {
        case .needsReauth(let message):
            logger.warning("\(key) needs a new login: \(message)")
            do { try vault.setStatus(key, .needsReauth) } catch { logger.error("cannot mark \(key) needs-reauth: \(error.message)") }
            schedule.withLock { $0.current[key] = nil; $0.failures[key] = nil; $0.retryAt[key] = nil }
            notifier.needsReauth(provider: key.provider, account: key.account, reason: message,
                                 command: providers.current.providers[key.provider]?.notifyCommand)
            return .failed(VaultError(.needsReauth, "\(message); log in again (vaultctl login \(key.provider))"))
        case .transient(let message, let retryAfter, _):
            let delay = backoff(key, retryAfter: retryAfter, minimum: 1)
            logger.warning("refresh of \(key) failed: \(message); retrying in \(Int(delay.rounded())) s")
            return .failed(VaultError(.temporary, message))
        case .rejected(let message):
            let delay = backoff(key, retryAfter: nil, minimum: 300)
            logger.error("refresh of \(key) refused: \(message); retrying in \(Int(delay.rounded())) s")
            return .failed(VaultError(.failure, message))
        }
    }

    /// Exponential backoff with jitter: 2, 4, 8 … s up to 10 min, ±20 %,
    /// never sooner than `Retry-After`.
    private func backoff(_ key: ItemKey, retryAfter: Double?, minimum: Double) -> Double {
        let n = schedule.withLock { s -> Int in
            let n = (s.failures[key] ?? 0) + 1
            s.failures[key] = n
            return n
        }
        let base = min(600, max(minimum, Double(1 << min(n, 10))))
        let jitter = 0.8 + 0.4 * Double(randomUniform(1_000_000)) / 1_000_000
        let delay = max(base * jitter, retryAfter ?? 0)
        let at = WallClock.now() + delay
        schedule.withLock { $0.retryAt[key] = at }
        set(key, due: at)
        return delay
    }
}

// MARK: - Min-heap on due time

private func push(_ heap: inout [RefreshEngine.Entry], _ e: RefreshEngine.Entry) {
    heap.append(e)
    var i = heap.count - 1
    while i > 0 {
        let parent = (i - 1) / 2
        if heap[parent].due <= heap[i].due { break }
        heap.swapAt(parent, i)
        i = parent
    }
}

private func popMin(_ heap: inout [RefreshEngine.Entry]) {
    guard !heap.isEmpty else { return }
    heap.swapAt(0, heap.count - 1)
    heap.removeLast()
    siftDown(&heap, 0)
}

private func siftDown(_ heap: inout [RefreshEngine.Entry], _ start: Int) {
    var i = start
    while true {
        let l = 2 * i + 1, r = l + 1
        var m = i
        if l < heap.count && heap[l].due < heap[m].due { m = l }
        if r < heap.count && heap[r].due < heap[m].due { m = r }
        if m == i { return }
        heap.swapAt(i, m)
        i = m
    }
}

private func heapify(_ heap: inout [RefreshEngine.Entry]) {
    var i = heap.count / 2
    while i >= 0 {
        siftDown(&heap, i)
        i -= 1
    }
}
