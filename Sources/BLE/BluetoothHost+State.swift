// BluetoothHost's state, by concern. The actor keeps its runtime (the controller and
// the layers, the broadcasts, the settle and owed-work bookkeeping of Ordering.swift)
// and one value per room: the links, the central role, the peripheral role, the
// registry (DeviceRegistry, its own type) and our private addresses (OwnAddresses,
// Privacy.swift). Each room is plain data; the code that changes it lives with its
// role (BluetoothHost+Links.swift, BluetoothHost+Central.swift, PeripheralManager.swift).

import GATT
import GAP
import HCI
import NIOCore

extension BluetoothHost {
    /// The links: who is connected, how each link ended (kept for a while after) and who
    /// waits for an end, and what each link has on top (its GATT client, the
    /// `RemotePeripheral` handed out, its MTU exchange, a Security Request outstanding).
    struct LinkState {
        /// Connected links by handle.
        var active: [UInt16: Connection] = [:]
        /// How each link ended, by link id; the oldest are forgotten first (`endedOrder`).
        var ended: [UInt64: LinkEnd] = [:]
        var endedOrder: [UInt64] = []
        /// Who waits for a link's end, by link id and waiter token.
        var endWaiters: [UInt64: [UInt64: CheckedContinuation<LinkEnd?, Never>]] = [:]
        var nextWaiter: UInt64 = 1
        /// How many waits for a live link's end have begun (each takes a token in
        /// `end(of:within:)`); tests check that a peer's broken answer starts none.
        var endWaitsBegun: UInt64 { nextWaiter - 1 }
        var nextLinkID: UInt64 = 1
        var remotes: [UInt64: RemotePeripheral] = [:]
        /// The GATT client of each link (it also reads the bearer for the server).
        var clients: [UInt64: GATTClient] = [:]
        var mtuExchanged: Set<UInt64> = []
        /// Each link's data length since its last LE Data Length Change (none: `DataLength.initial`).
        var dataLengths: [UInt64: DataLength] = [:]
        /// Each link's connection parameters: LE Connection Complete's, then the last
        /// LE Connection Update Complete's.
        var parameters: [UInt64: ConnectionParameters] = [:]
        /// Peripheral links waiting for TGAP(conn_pause_peripheral) before the host asks
        /// for the preferred parameters (`scheduleParameterRequest`).
        var parameterRequests: [UInt64: LoopTimer] = [:]
        /// What each link's peer said of itself (LE Read Remote Features, Read Remote
        /// Version Information): it does not change while the link lasts.
        var remoteFeatures: [UInt64: LEFeatures] = [:]
        var remoteVersions: [UInt64: RemoteVersion] = [:]
        /// Peripheral links with a Security Request outstanding (one at a time).
        var securityRequested: Set<UInt16> = []

        /// How many ended links `ended` remembers.
        static let endsRemembered = 256

        /// Link `handle` ended: it leaves `active`. The GATT server's events come to the
        /// host as the server takes each PDU, on the loop, and the server forgets the
        /// link in the same turn as this, so no later server event can name the link
        /// (a new link may take its handle): `LinkEndOrderTests`.
        mutating func remove(_ handle: UInt16) -> Connection? { active.removeValue(forKey: handle) }

        mutating func newLinkID() -> UInt64 {
            defer { nextLinkID += 1 }
            return nextLinkID
        }

        mutating func newWaiterToken() -> UInt64 {
            defer { nextWaiter += 1 }
            return nextWaiter
        }

        /// Link `id` ended: what it had on top goes, its end is remembered (the oldest
        /// of more than `endsRemembered` forgotten); returns who waited for the end.
        mutating func ended(_ id: UInt64, _ end: LinkEnd) -> [CheckedContinuation<LinkEnd?, Never>] {
            remotes[id] = nil
            clients[id] = nil
            mtuExchanged.remove(id)
            dataLengths[id] = nil
            parameters[id] = nil
            parameterRequests.removeValue(forKey: id)?.cancel()
            remoteFeatures[id] = nil
            remoteVersions[id] = nil
            ended[id] = end
            endedOrder.append(id)
            if endedOrder.count > Self.endsRemembered { ended[endedOrder.removeFirst()] = nil }
            return Array((endWaiters.removeValue(forKey: id) ?? [:]).values)
        }
    }

    struct ConnectWaiter {
        /// Who the connect is to (more than one: through the Filter Accept List).
        var peers: [DeviceAddress]
        var continuation: CheckedContinuation<Connection, any Error>
        /// The connect timeout, on the loop's time.
        var timer: LoopTimer
    }

    /// How the controller scans: what LE Set Scan Parameters and LE Set Scan Enable (or
    /// their extended forms) say.
    struct ScanSettings: Equatable {
        var active: Bool
        var filterDuplicates: Bool
        /// Scanning_Filter_Policy 1: only the devices on the Filter Accept List are reported.
        var acceptListOnly: Bool
        /// Scanning_PHYs: bit 0 LE 1M, bit 2 LE Coded (the primary PHYs heard).
        var phys: UInt8 = 0x01
        /// LE_Scan_Interval and LE_Scan_Window, in 0.625 ms.
        var timing = ScanTiming.standard

        /// What several scans need of the controller at once (as bluetoothd merges its
        /// clients' discovery filters): active while any is, filtering duplicates and
        /// through the accept list only while every one does, every PHY any names, the
        /// timing that listens the most (the shorter interval between equals). nil for none.
        static func merged(_ all: [ScanSettings]) -> ScanSettings? {
            guard let first = all.first else { return nil }
            var m = first
            m.active = all.contains(where: \.active)
            m.filterDuplicates = all.allSatisfy(\.filterDuplicates)
            m.acceptListOnly = all.allSatisfy(\.acceptListOnly)
            m.phys = all.reduce(0) { $0 | $1.phys }
            m.timing = all.map(\.timing).max { $0.listensLess(than: $1) } ?? first.timing
            return m
        }
    }

    struct ScanSubscriber {
        var filter: ScanFilter
        /// What this scan asked for (the controller scans with the first's kind, and
        /// through the accept list only while every scan asks for that).
        var settings: ScanSettings
        /// Counts what its full buffer drops.
        var continuation: BufferedStream<ScanResult>.Continuation
        /// What a scan that filters duplicates has been handed.
        var reported = ReportedPDUs()

        /// Whether `a` goes to this scan as a duplicate filter lets it: always, unless the
        /// scan filters duplicates and has been handed the same PDU before.
        mutating func passesDuplicateFilter(_ a: Advertisement) -> Bool {
            !settings.filterDuplicates || reported.insert(a)
        }
    }

    /// The advertising PDUs a scan that filters duplicates has been handed, told apart
    /// as Rootcanal's controller tells them (the whole PDU) and the extended commands'
    /// ADI does: the address and its type, the kind of PDU, the set, the data. A device
    /// whose data changes is reported again. The controller's own filter is not enough:
    /// it filters only while every scan asks for it, and forgets at each scan enable,
    /// which comes whenever another scan starts or ends. The newest `capacity` PDUs are
    /// remembered; one forgotten is reported again when it comes back.
    struct ReportedPDUs {
        static let capacity = 4096
        struct Key: Hashable {
            var address: BluetoothAddress
            var addressType: UInt8
            var eventType: UInt8
            var sid: UInt8?
            var data: [UInt8]
        }
        private var keys: Set<Key> = []
        /// The remembered keys, oldest at `next` once the ring is full.
        private var ring: [Key] = []
        private var next = 0

        /// True when `a` is new (and remembers it); false for a duplicate.
        mutating func insert(_ a: Advertisement) -> Bool {
            let k = Key(address: a.address, addressType: a.addressType.rawValue, eventType: a.eventType, sid: a.advertisingSID, data: a.raw)
            guard keys.insert(k).inserted else { return false }
            if ring.count < Self.capacity {
                ring.append(k)
            } else {
                keys.remove(ring[next])
                ring[next] = k
                next = (next + 1) % Self.capacity
            }
            return true
        }
    }

    /// The central role: the connect in progress and those queued behind it, the scans.
    struct CentralState {
        var connectWaiter: ConnectWaiter?
        /// The controller's Filter Accept List size, read the first time the list is used.
        var acceptListSize: Int?
        /// The devices `setAcceptList` named: those advertising with an
        /// `AdvertisingFilter` lets in.
        var acceptList: [DeviceAddress] = []
        /// What the controller's Filter Accept List holds (nil: not known, as after a reset).
        var controllerAcceptList: [DeviceAddress]?
        var connectQueue: [CheckedContinuation<Void, Never>] = []
        /// LE Create Connection Cancels whose LE Connection Complete (Unknown Connection
        /// Identifier) has not come yet.
        var cancelsOwed = 0
        /// Links made as central that no connect waited for (its attempt was given up as
        /// the controller made them), by link id: being ended, never handed out.
        var unclaimed: Set<UInt64> = []
        var connectBusy = false
        var scans: [UInt64: ScanSubscriber] = [:]
        /// How the controller scans now (nil: it does not), as its last answered scan enable left it.
        var scanning: ScanSettings?
        /// One change of the controller's scanning at a time (`withScanLock`).
        var scanTurn = Turnstile()
        /// Windowed scans that have ended: each still gets the reports the controller sent
        /// before it answered the scan stop, then finishes (see `finishScan`).
        var draining: [(subscriber: ScanSubscriber, answer: Int)] = []
        /// Answers to scan enable/disable commands: how many the host has seen returned
        /// (`scanAnswersOwed`) and how many the event follower has come to in its stream.
        var scanAnswersOwed = 0, scanAnswersSeen = 0
        var nextScan: UInt64 = 1
        var assembler = ExtendedReportAssembler()
    }

    /// The peripheral role (PeripheralManager.swift): published services, advertising,
    /// the stream of read and write requests.
    struct PeripheralState {
        var published: [ObjectIdentifier: PublishedService] = [:]
        /// The notification writers handed out and still alive: each fails when the
        /// transport ends (`NotificationWriter`).
        var writers: [ObjectIdentifier: WeakWriter] = [:]
        /// What each advertising set advertises, by Advertising_Handle: 0 is
        /// `startAdvertising`'s, the others `addAdvertisingSet`'s (extended commands only).
        var advertising: [UInt8: AdvertisingConfiguration] = [:]
        /// Sets that made a link still up (LE Advertising Set Terminated), with the link's
        /// handle: the controller stopped them, and they resume when that link ends.
        var advertisingLinks: [UInt8: UInt16] = [:]
        /// Sets LE Advertising Set Terminated said made a link whose connection has not
        /// reached the host yet, by the link's handle: announced when it does.
        var linksAwaitingSet: [UInt16: UInt8] = [:]
        /// Links that held a set the controller has enabled again since, by handle: they
        /// hold nothing, and their end starts no set again.
        var linksHoldingNothing: Set<UInt16> = []
        /// When each set given a duration ends, in the host's `now`.
        var advertisingDeadlines: [UInt8: Duration] = [:]
        /// Sets a duration or event limit ended: configured, off air until the
        /// application starts them again.
        var advertisingEnded: Set<UInt8> = []
        /// How many times the controller has enabled each set (an LE Set Extended
        /// Advertising Enable naming it answered with success), counted as the answers
        /// arrive: the set's enabling, in the controller's order.
        var enablings: [UInt8: Int] = [:]
        /// The sets being changed (the application's `setAdvertising`, and every
        /// (re)enabling the host makes, `startAdvertisingNow`): for each change under
        /// way, the enabling the set had when it began (`beginReplacing`). An end of that
        /// enabling or an earlier one is the replaced advertisement's.
        var replacing: [UInt8: [Int]] = [:]
        /// The host's timer for a duration on a controller driven with the legacy commands.
        var legacyAdvertisingTimer: LoopTimer?
        /// The periodic advertising each set has on the controller (parameters, data, enabled).
        var periodicOnAir: [UInt8: PeriodicConfiguration] = [:]

        mutating func cancelLegacyAdvertisingTimer() {
            legacyAdvertisingTimer?.cancel()
            legacyAdvertisingTimer = nil
        }
        /// The sets the controller advertises now (not stopped for a link, not ended), by handle.
        var setsOnAir: [UInt8] { advertising.keys.filter { advertisingLinks[$0] == nil && !advertisingEnded.contains($0) }.sorted() }
        /// One advertising change at a time (`withAdvertisingLock`): the application's
        /// start or stop, the resumption after a link, a new private address.
        var advertisingTurn = Turnstile()
        var requestContinuation: BufferedStream<ReadWriteRequest>.Continuation?
        var requestGeneration: UInt64 = 0
        /// Requests handed to a `requests()` consumer, with its generation, possibly unanswered.
        var handedRequests: [(UInt64, GATTServer.Request)] = []
    }
}

/// One holder at a time, the others waiting in order: a lock around a change of
/// several commands (the actor lets other calls in at every await of it). Each change
/// has its commands' timeouts, so every wait ends.
struct Turnstile {
    private var busy = false
    private var waiting: [CheckedContinuation<Void, Never>] = []

    /// Takes the turn when it is free; false: `wait`, then ask again.
    mutating func enter() -> Bool {
        guard !busy else { return false }
        busy = true
        return true
    }

    mutating func wait(_ k: CheckedContinuation<Void, Never>) { waiting.append(k) }

    /// Gives the turn back and wakes the first waiting.
    mutating func leave() {
        busy = false
        if !waiting.isEmpty { waiting.removeFirst().resume() }
    }
}

/// A notification writer the host fails when its transport ends, held weakly: the
/// application's reference keeps it.
struct WeakWriter {
    weak var writer: NotificationWriter?
}
