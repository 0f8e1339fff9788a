// The facade's ordering guarantee: the same program on the same inputs sends the
// same HCI conversation. Two pieces make it hold.
//
// 1. The facade runs on the controller's event loop, as the layers below it do:
//    `BluetoothHost` and `RemotePeripheral` are actors whose executor is that loop.
//    The host takes every layer's events as they are emitted (observers called on
//    the loop), so events are handled in the order the loop produced them, never in
//    the order a thread pool happened to pick them up, and none waits in a buffer.
// 2. What ends synchronously in the application's task (it leaves a `for await` over
//    a scan or a subscription, or the task iterating is cancelled) owes the
//    controller traffic: a scan stop, a CCCD write. That work is queued, in order,
//    and the host's operations first finish what is owed (`settle()`), so the owed
//    traffic goes out before the traffic of whatever the program does next.
//    Queued work also starts by itself at once, for a program that does nothing next.
//    Work a layer's event owes (the Database Hash read that stores a new bond's GATT
//    layout) is queued by a synchronous observer as the layer emits the event, not by
//    the task following its stream: that task raced the program, which had already
//    resumed from the pairing, and a replay saw the read before or after the program's
//    next request (PairingReplayTests, 1 run in 12 under load).

import DequeModule
import GATT
import HCI
import L2CAP
import SMP
import Synchronization

/// Work owed to the controller by something that ended outside the host (a consumer
/// letting go of a stream), in the order it was owed.
final class OwedWork: Sendable {
    typealias Job = @Sendable () async -> Void
    private let jobs = Mutex(Deque<Job>())

    func add(_ job: @escaping Job) { jobs.withLock { $0.append(job) } }
    func next() -> Job? { jobs.withLock { $0.popFirst() } }
}

extension BluetoothHost {
    /// Queues work owed to the controller (from any thread, synchronously, so the
    /// program's next operation finds it) and starts it.
    nonisolated func owe(_ job: @escaping @Sendable () async -> Void) {
        owed.add(job)
        Task { await self.settle() }
    }

    /// Finishes the owed work, in order; a second caller waits for the first to finish it.
    /// Called first by the operations that can follow a scan or subscription the
    /// program let go of: scanning and connecting, every `RemotePeripheral` operation,
    /// `disconnect`, `secure`, `close` and the GAP setters. (The peripheral role's
    /// operations owe nothing and do not wait.)
    func settle() async {
        if settling {
            await withCheckedContinuation { settleWaiters.append($0) }
            return
        }
        settling = true
        while let job = owed.next() { await job() }
        settling = false
        let waiters = settleWaiters
        settleWaiters.removeAll()
        for w in waiters { w.resume() }
    }
}

extension BluetoothHost {
    /// Waits until the host has finished what the controller's and the links' events it
    /// has taken left to do (`react`: advertising to resume, a link to end).
    func quiesce() async {
        guard reacting > 0 else { return }
        await withCheckedContinuation { quietWaiters.append($0) }
    }
}
