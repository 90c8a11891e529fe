@preconcurrency import Glibc
internal import CTokenVaultLinux

/// A value guarded by a readers-writer lock (`pthread_rwlock`, writers
/// preferred), for state that every request reads and few change.
///
/// Readers never wait for each other. `Synchronization.Mutex` on Linux is a
/// priority-inheritance futex that hands the lock over to a sleeping waiter
/// in the kernel: with 16 connection threads reading the vault on 2 cores it
/// fell into lock convoys that halved throughput (docs/performance.md).
///
/// Calls must not nest on one thread (a `read` or `withLock` inside
/// another on the same lock): the writer-preferring lock would deadlock
/// or refuse, and a refused lock stops the process rather than run the
/// body unguarded.
public final class SharedLock<Value: Sendable>: @unchecked Sendable {
    private let lock: UnsafeMutablePointer<pthread_rwlock_t>
    private let storage: UnsafeMutablePointer<Value>

    public init(_ value: sending Value) {
        lock = .allocate(capacity: 1)
        let r = ctv_rwlock_init_prefer_writer(lock)
        precondition(r == 0, "pthread_rwlock_init failed: \(r)")
        storage = .allocate(capacity: 1)
        storage.initialize(to: value)
    }

    deinit {
        pthread_rwlock_destroy(lock)
        lock.deallocate()
        storage.deinitialize(count: 1)
        storage.deallocate()
    }

    /// Runs `body` with shared (read) access; other readers run alongside.
    public func read<R, E: Error>(_ body: (borrowing Value) throws(E) -> R) throws(E) -> R {
        let r = pthread_rwlock_rdlock(lock)
        precondition(r == 0, "SharedLock.read: pthread_rwlock_rdlock failed (\(r)); nested use of the lock?")
        defer { pthread_rwlock_unlock(lock) }
        return try body(storage.pointee)
    }

    /// Runs `body` with exclusive (write) access.
    public func withLock<R, E: Error>(_ body: (inout Value) throws(E) -> R) throws(E) -> R {
        let r = pthread_rwlock_wrlock(lock)
        precondition(r == 0, "SharedLock.withLock: pthread_rwlock_wrlock failed (\(r)); nested use of the lock?")
        defer { pthread_rwlock_unlock(lock) }
        return try body(&storage.pointee)
    }
}
