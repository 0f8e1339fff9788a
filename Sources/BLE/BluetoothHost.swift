// The facade: one `BluetoothHost` per controller. It owns the controller, L2CAP, the local
// GATT server and the known-device registry, and follows every connection from its
// LE Connection Complete to its Disconnection Complete. `central` and `peripheral`
// are the two roles' views of it; both can be used at once.
//
// Streams: every AsyncSequence here keeps a bounded buffer of the newest elements
// and counts what it dropped (`dropped`); connection-scoped streams finish when the
// link drops, throwing `BLEError.disconnected(reason:)` with the controller's reason.

import ATT
import GAP
import GATT
import HCI
import L2CAP
import Logging
import NIOCore
import SMP

/// FA01: what the controller is doing.
public enum HostState: Hashable, Sendable, CustomStringConvertible {
    /// Created; `start()` not called yet.
    case idle
    /// Reset and the initialisation sequence are running.
    case initializing
    case ready
    /// `reset()` is running.
    case resetting
    /// Initialisation failed, or the controller reported a hardware error.
    case failed(String)
    /// The transport ended; the host cannot be used any more.
    case transportClosed(String)

    public var description: String {
        switch self {
        case .idle: return "idle"
        case .initializing: return "initializing"
        case .ready: return "ready"
        case .resetting: return "resetting"
        case let .failed(why): return "failed: \(why)"
        case let .transportClosed(why): return "transport closed: \(why)"
        }
    }
}

public enum BLEError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The operation needs `.ready`.
    case notReady(HostState)
    /// The link went away; `reason` is the Disconnection Complete reason.
    case disconnected(reason: HCIStatus)
    case transportClosed(String)
    case connectionTimeout(BluetoothAddress, within: Duration)
    /// `Central.connect(toAnyOf:)` connected to none of them within its limit.
    case noConnection(toAnyOf: [DeviceAddress], within: Duration)
    /// LE Connection Complete reported a failure.
    case connectionFailed(BluetoothAddress, HCIStatus)
    /// The peer answered with an ATT Error Response.
    case att(ATTErrorCode, handle: UInt16)
    /// The local service, characteristic or descriptor is not published.
    case notPublished(String)
    /// What was asked does not fit the attribute (no CCCD to subscribe with, ...).
    case notSupported(String)
    /// Every advertising set the controller has is taken (`maximum`, set 0 included).
    case noAdvertisingSetFree(maximum: Int)
    /// The advertising set was removed, or never added.
    case unknownAdvertisingSet(UInt8)
    /// An argument is outside the range the operation takes (what it takes is said).
    case invalidArgument(String)
    /// `Central.synchronize` found none of the periodic advertising trains it looked
    /// for within its limit.
    case periodicSyncTimeout([PeriodicAdvertiser], within: Duration)
    /// The controller could not synchronise to the periodic advertising (LE Periodic
    /// Advertising Sync Established's status).
    case periodicSyncFailed([PeriodicAdvertiser], HCIStatus)
    /// The controller lost a periodic advertising train it followed (no packet within
    /// the sync timeout), or was reset.
    case periodicSyncLost(PeriodicAdvertiser)
    /// The controller's Filter Accept List holds the application's accept list while
    /// advertising uses it (`AdvertisingFilter`): what would change it now is refused.
    case acceptListInUse(String)

    public var description: String {
        switch self {
        case let .notReady(s):
            switch s {
            case .idle: return "the host is not started: call start() first"
            case .initializing: return "the host is still starting: wait for start() to return"
            case .resetting: return "the host is resetting: wait for reset() to return"
            case let .failed(why): return "the controller failed (\(why)): call reset(), or close() the host and open a new one"
            case .ready, .transportClosed: return "the controller is not ready (\(s))"
            }
        case let .disconnected(r): return "disconnected: \(r)"
        case let .transportClosed(r): return "the transport is closed (\(r)): this host cannot be used any more; open a new one"
        case let .connectionTimeout(a, d): return "no connection to \(a) within \(d) (is it advertising as connectable, and is the address type right?)"
        case let .noConnection(a, d):
            return "no connection to any of \(a.map(\.description).joined(separator: ", ")) within \(d) (are they advertising as connectable, with those address types?)"
        case let .connectionFailed(a, s): return "connection to \(a) failed: \(s)"
        case let .att(code, h): return "peer refused (handle 0x\(hex4(h))): \(code)"
        case let .notPublished(what): return "\(what) is not published"
        case let .notSupported(what): return what
        case let .noAdvertisingSetFree(n): return "all \(n) advertising sets of the controller are taken: remove one first"
        case let .unknownAdvertisingSet(h): return "advertising set \(h) is not advertising (removed, or never added)"
        case let .invalidArgument(why): return why
        case let .periodicSyncTimeout(a, d):
            return "no periodic advertising from \(PeriodicAdvertiser.list(a)) found within \(d) (is it advertising it, in an extended advertising set with that SID?)"
        case let .periodicSyncFailed(a, s): return "synchronising to the periodic advertising of \(PeriodicAdvertiser.list(a)) failed: \(s)"
        case let .periodicSyncLost(a): return "lost the periodic advertising of \(a)"
        case let .acceptListInUse(why): return why
        }
    }
}

/// Whether to drive the controller with the extended advertising, scanning and
/// connection commands (Bluetooth 5).
public enum ExtendedCommandsPolicy: Hashable, Sendable {
    /// When the controller has them (then for everything: legacy and extended
    /// commands must not be mixed).
    case automatic
    /// Never: legacy commands only (31-byte advertising data).
    case never
}

/// One LE link, as the host knows it.
public struct Connection: Hashable, Sendable {
    public var handle: UInt16
    /// Our role on the link.
    public var role: ConnectionRole
    public var peer: BluetoothAddress
    public var peerType: AddressType
    /// Tells this link from a later one that reuses the handle.
    public var id: UInt64
}

public enum ConnectionEvent: Hashable, Sendable {
    case connected(Connection)
    case disconnected(Connection, reason: HCIStatus)
    /// LE Connection Update Complete: interval (1.25 ms units), latency, timeout (10 ms units).
    case parametersUpdated(Connection, interval: UInt16, latency: UInt16, supervisionTimeout: UInt16)
    /// The link was encrypted (pairing or a bond's key) or its key refreshed.
    case securityChanged(Connection, LinkSecurityState)
    /// The peer opened an enhanced ATT bearer (EATT, SPSM 0x0027) on the link, and the
    /// local GATT server serves it (`enhancedATT`); one event per bearer, with its ATT_MTU.
    case enhancedBearerAccepted(Connection, mtu: Int)
    /// The link's PHYs changed, or an update this side asked for completed (LE PHY
    /// Update Complete); either side may start one (`updatePHY`).
    case phyUpdated(Connection, LinkPHY)
    /// The link's data length changed (LE Data Length Change): controllers agree on
    /// longer packets after `updateDataLength`, or by themselves after connecting.
    case dataLengthChanged(Connection, DataLength)
}

/// The host's security policy: what pairing announces and allows, where bonds are
/// kept, who answers pairing prompts, and what the GATT roles do on an
/// Insufficient Authentication or Encryption error.
public struct SecurityOptions: Sendable {
    public var pairing: PairingConfiguration
    /// Where bonds live (default: in memory; `FileBondStore` keeps them across runs).
    public var store: any BondStore
    public var delegate: any PairingDelegate
    /// Where pairing's randoms come from (`.seeded` for reproducible test runs).
    public var random: SecurityRandom
    /// As central: pair or encrypt on an Insufficient Authentication/Encryption error
    /// and retry the operation once (as BlueZ and iOS do).
    public var pairOnDemand: Bool
    /// As peripheral: send a Security Request when a central touches a protected attribute.
    public var requestSecurity: Bool
    /// Advertise, scan and connect from resolvable private addresses that change every
    /// `rotation`, and give bonded peers our IRK (Privacy.swift). Nil: the public address.
    public var privacy: PrivacyOptions?

    public init(pairing: PairingConfiguration = PairingConfiguration(), store: any BondStore = InMemoryBondStore(),
                delegate: any PairingDelegate = AutomaticPairingDelegate(), random: SecurityRandom = .system,
                pairOnDemand: Bool = true, requestSecurity: Bool = true, privacy: PrivacyOptions? = nil) {
        self.privacy = privacy
        self.pairing = pairing
        self.store = store
        self.delegate = delegate
        self.random = random
        self.pairOnDemand = pairOnDemand
        self.requestSecurity = requestSecurity
    }
}

/// How a link ended.
enum LinkEnd: Hashable, Sendable {
    case disconnected(HCIStatus)
    case transportClosed(String)
    var error: BLEError {
        switch self {
        case let .disconnected(r): return .disconnected(reason: r)
        case let .transportClosed(r): return .transportClosed(r)
        }
    }
}

public actor BluetoothHost: LoopIsolated {
    public nonisolated let controller: HCIController
    /// The facade runs on the controller's loop, as the layers below it do (see Ordering.swift).
    public nonisolated var unownedExecutor: UnownedSerialExecutor { controller.unownedExecutor }
    /// The event loop this controller's stack runs on. Code that wants no thread
    /// hand-off per operation (a daemon notifying at a high rate) can run there: an
    /// actor whose executor is `loopExecutor`.
    public nonisolated var loop: any EventLoop { controller.loop }
    /// The serial executor of every actor on `loop`, the stack's and the facade's. An
    /// application actor that uses it (holding it, and returning
    /// `loopExecutor.asUnownedSerialExecutor()` as its `unownedExecutor`) calls into
    /// the stack without a job on the loop per call. (`loop.executor` is NIO's, another
    /// executor to Swift: each call from it to the stack's actors is a job.)
    public nonisolated var loopExecutor: LoopExecutor { controller.loopExecutor }

    /// The loop as a task executor: a task that prefers it
    /// (`withTaskExecutorPreference(host.taskExecutor) { ... }`) resumes on the loop
    /// after each wait inside the stack instead of on Swift's global pool.
    public nonisolated var taskExecutor: LoopTaskExecutor { controller.taskExecutor }
    public nonisolated let l2cap: L2CAPHost
    /// The local GATT server (FA06–FA09 go through `peripheral`). The host takes its
    /// events and requests as they happen: its `events` stream is finished and its
    /// `requests` stream empty (`peripheral.events()` and `requests()` have them).
    public nonisolated let server: GATTServer
    /// Where the GAP and GATT services' characteristics are in `server`.
    public nonisolated let mandatory: MandatoryHandles
    /// The local GATT server also takes enhanced ATT bearers (EATT, SPSM 0x0027):
    /// Server Supported Features says so, and each enhanced credit-based channel a
    /// client opens to 0x0027 on an encrypted link becomes one more bearer of its
    /// connection (on an unencrypted link it is refused for security).
    public nonisolated let enhancedATT: Bool
    /// Pairing, encryption and bonds on every link (SMP).
    public nonisolated let security: SecurityManager
    public nonisolated let securityOptions: SecurityOptions
    public nonisolated let logger: Logger
    public private(set) var state: HostState = .idle
    /// What initialisation learned about the controller.
    public private(set) var info: ControllerInfo?

    let stateBroadcast = Broadcast<HostState>(replaysLatest: true)
    let connectionBroadcast = Broadcast<ConnectionEvent>()
    let peripheralBroadcast = Broadcast<PeripheralEvent>()
    /// Every link-layer event of a known link, and every link's end, as a link
    /// procedure waits for its own (`linkProcedure`).
    let linkOutcomes = Broadcast<LinkOutcome>()
    // The host's state by concern (BluetoothHost+State.swift): each room is a struct
    // of its own, so a reader knows which one to open.
    /// Who is connected, how links ended and who waits for that, each link's client.
    var links = LinkState()
    /// Connecting and scanning.
    var centralState = CentralState()
    var syncState = SyncState()
    /// Published services, advertising, the request stream.
    var peripheralState = PeripheralState()
    /// The known devices (FA10–FA12), fed by every advertising report.
    var registry: DeviceRegistry
    var tasks: [Task<Void, Never>] = []
    /// Traffic owed by streams the application let go of (Ordering.swift).
    let owed = OwedWork()
    var settling = false
    var settleWaiters: [CheckedContinuation<Void, Never>] = []
    /// Link events being handled, and who waits for none to be (`close()`).
    var reacting = 0
    var quietWaiters: [CheckedContinuation<Void, Never>] = []
    /// When this host was made, in its loop's time: the registry's times count from it.
    let epoch: NIODeadline

    /// The ATT_MTU this host offers on every link (Exchange MTU, both directions).
    public nonisolated let attMTU: UInt16
    /// What the GAP service says this peripheral would have its central give it.
    public nonisolated let preferredConnectionParameters: PreferredConnectionParameters?
    /// Whether the host asks its centrals for them (see `init`).
    public nonisolated let requestsPreferredParameters: Bool

    /// What an enhanced ATT bearer's channel offers, in either role: MTU = our ATT
    /// MTU (at least 64), MPS one LE data PDU's worth, 10 credits.
    public nonisolated var enhancedBearerParameters: CreditBasedParameters {
        CreditBasedParameters(mtu: Swift.max(64, attMTU), mps: 247, initialCredits: 10)
    }
    let extendedPolicy: ExtendedCommandsPolicy
    /// Whether this host drives the controller with the extended commands (decided at `start`).
    public private(set) var usesExtendedCommands = false
    /// The PHYs `setPreferredPHYs` gave the controller (set again after a reset).
    var preferredPHYs: (tx: Set<PHY>, rx: Set<PHY>)?
    /// What `setPreferredDataLength` gave the controller (written again after a reset).
    var preferredDataLength: LEWriteSuggestedDefaultDataLength?

    /// Our private addresses (Privacy.swift).
    var own = OwnAddresses()

    /// `commandTimeout` bounds every HCI command; `knownDeviceCapacity` bounds the registry.
    /// `deviceName` and `appearance` are what the GAP service tells a central that
    /// reads them (the name also goes into advertising only when the advertising data
    /// says so); `setDeviceName(_:)` and `setAppearance(_:)` change them later.
    /// `preferredConnectionParameters` go into the GAP service (Peripheral Preferred
    /// Connection Parameters, Vol 3, Part C, §12.3) for centrals that read them;
    /// `start()` refuses values outside §12.3's ranges. With `requestsPreferredParameters`
    /// the host, as peripheral, asks each central for them 5 s after the link came up
    /// (TGAP(conn_pause_peripheral)) unless the link meets them already, as Zephyr and
    /// NimBLE peripherals do.
    public init(transport: any HCITransport, logger: Logger = Logger(label: "ble"),
                commandTimeout: Duration = .seconds(5), knownDeviceCapacity: Int = 1024,
                extendedCommands: ExtendedCommandsPolicy = .automatic, attMTU: UInt16 = 517,
                security: SecurityOptions = SecurityOptions(), deviceName: String = "swift-ble-host", appearance: UInt16 = 0,
                enhancedATT: Bool = false, preferredConnectionParameters: PreferredConnectionParameters? = nil,
                requestsPreferredParameters: Bool = false) {
        self.preferredConnectionParameters = preferredConnectionParameters
        self.requestsPreferredParameters = requestsPreferredParameters
        self.logger = logger
        self.enhancedATT = enhancedATT
        self.attMTU = Swift.max(23, attMTU)
        self.extendedPolicy = extendedCommands
        self.controller = HCIController(transport: transport, commandTimeout: commandTimeout, logger: logger)
        self.epoch = controller.loop.now
        self.l2cap = L2CAPHost(controller: controller, logger: logger)
        var db = AttributeDatabase()
        // Mandatory GAP and GATT services (Device Name, Appearance, Service Changed, ...):
        // the first services of an empty database, so this cannot fail.
        self.mandatory = (try? db.addMandatoryServices(deviceName: deviceName, appearance: appearance,
                                                       serverFeatures: enhancedATT ? ServerSupportedFeatures.eatt : nil,
                                                       preferredConnectionParameters: preferredConnectionParameters))
            ?? .none
        self.server = GATTServer(database: db, loop: controller.loop, streamsEvents: false, logger: logger)
        self.securityOptions = security
        self.security = SecurityManager(l2cap: l2cap, configuration: security.pairing, store: security.store, delegate: security.delegate,
                                        random: security.random, logger: logger)
        self.registry = DeviceRegistry(capacity: knownDeviceCapacity)
        stateBroadcast.yield(.idle)
    }

    /// The central role: scanning, known devices, connecting (FA02–FA04, FA10–FA15).
    public nonisolated var central: Central { Central(host: self) }
    /// The peripheral role: advertising and the local GATT server (FA05–FA09).
    public nonisolated var peripheral: PeripheralManager { PeripheralManager(host: self) }

    // MARK: FA01 hardware state

    /// The state now and every change after it. Buffer: the newest 16 states.
    public nonisolated func states() -> BufferedStream<HostState> {
        stateBroadcast.subscribe(capacity: 16)
    }

    func setState(_ s: HostState) {
        guard state != s else { return }
        if case .transportClosed = state { return }
        state = s
        logger.debug("controller state", metadata: ["ble.state": "\(s)"])
        stateBroadcast.yield(s)
    }

    func requireReady() throws {
        guard state == .ready else {
            if case let .transportClosed(r) = state { throw BLEError.transportClosed(r) }
            throw BLEError.notReady(state)
        }
    }

    /// Starts following the controller and initialises it (Reset unless `reset` is
    /// false); the state goes initializing → ready, or failed. Returns what was learned.
    @discardableResult
    public func start(reset: Bool = true) async throws -> ControllerInfo {
        if let p = preferredConnectionParameters, !p.isValid {
            throw BLEError.invalidArgument("Peripheral Preferred Connection Parameters outside Vol 3, Part C, §12.3's ranges: \(p)")
        }
        if tasks.isEmpty {
            await controller.start()
            let transportEnd = await followController()
            await l2cap.start()
            await security.start()
            // A bond's new link puts the client's record back in the server at once, before
            // it takes the client's next PDU. It, or a new bond, also stores the peer's GATT
            // layout: owed work, queued as the Security Manager says so, before the program
            // that waited for the encryption goes on (a follower task would race the program,
            // and the Database Hash's read would go out before or after its next request).
            await security.addEventObserver { [weak self] e in
                guard let host = self else { return }
                switch e {
                case let .securityChanged(handle, state) where state.encrypted && state.bonded:
                    host.restoreBondedClient(handle)
                    host.owe { [weak host] in await host?.storeLayout(handle) }
                case let .paired(handle, _, result) where result.security.bonded:
                    host.owe { [weak host] in await host?.storeLayout(handle) }
                default:
                    break
                }
                // The rest of what the host does with it, as it is emitted too.
                host.taking { $0.take(e) }
            }
            // The server judges each request by the security the Security Manager has
            // just given the link (it sets it in L2CAP synchronously, on this loop).
            // Whether the peer has a stored key matters only while the link is unencrypted.
            let l2cap = self.l2cap, security = self.security
            await server.setSecuritySource { handle in
                guard l2cap.loop.inEventLoop else { return nil }
                return l2cap.onLoop { $0.linkSecurity(handle: handle) }.map {
                    LinkSecurity(encrypted: $0.encrypted, authenticated: $0.authenticated, keySize: $0.keySize,
                                 keyAvailable: !$0.encrypted && security.onLoop(handle) { $0.hasStoredKey(handle: $1) })
                }
            }
            // A bonded client's CCCDs (and features, and the hash it is aware of) go to its
            // bond as the server takes them, on the loop: a client that subscribes and
            // leaves at once still finds its subscriptions at its next link (the events'
            // follower could reach the write after the link's end, and store nothing).
            let clientRecord: SecurityManager.ClientRecordSource = { [weak server] handle in
                guard let server, server.loop.inEventLoop else { return nil }
                let r = server.onLoop { $0.clientRecord(connection: handle) }
                return SecurityManager.ClientRecord(configurations: r.configurations, supportedFeatures: r.supportedFeatures, hash: r.awareOfHash)
            }
            await server.addEventObserver { e in
                guard security.loop.inEventLoop else { return }
                switch e {
                case let .subscription(_, handle, _, _), let .clientRecordChanged(handle):
                    if let record = clientRecord(handle) { security.onLoop { $0.saveClientRecord(record, handle: handle) } }
                default:
                    break
                }
            }
            // And a new bond takes what the client set before the pairing, as it is stored.
            await security.setClientRecordSource(clientRecord)
            // The server's events and the requests the application answers, as the server
            // takes the PDUs that make them (after the observer above stored a record).
            await server.addEventObserver { [weak self] e in self?.taking { $0.take(e) } }
            await server.setRequestHandler { [weak self] r in self?.taking { $0.take(r) } }
            tasks.append(Task {
                for await _ in transportEnd {}
                await self.transportEnded()
            })
            if enhancedATT {
                // EATT bearers: MTU = our ATT MTU, MPS one LE data PDU's worth; only on an
                // encrypted link (Vol 3, Part G, §5.3.2, as BlueZ listens with
                // BT_SECURITY_MEDIUM): a request on another is refused, Vol 3, Part C,
                // §10.3.1's way, and the client encrypts or pairs and asks again.
                let eatt = await l2cap.listen(spsm: EATTChannel.spsm, parameters: enhancedBearerParameters,
                                              security: ChannelSecurity(level: .encrypted, minimumKeySize: Int(securityOptions.pairing.minimumKeySize)))
                tasks.append(Task { await self.serveEnhancedBearers(eatt) })
            }
        }
        setState(.initializing)
        do {
            let i = try await controller.initialize(reset: reset, extendedAdvertising: extendedPolicy == .automatic)
            adopt(i)
            try await startPrivacy(i)
            setState(.ready)
            return i
        } catch {
            // A closed transport ends the host as it would after start (its waiters fail,
            // its tasks end); the state says why.
            if await controller.closedReason != nil { await transportEnded() } else { setState(.failed("\(error)")) }
            throw error
        }
    }

    /// What initialisation learned, and whether to drive the controller with the extended commands.
    func adopt(_ i: ControllerInfo) {
        info = i
        usesExtendedCommands = extendedPolicy == .automatic && i.supportsExtendedAdvertising
        // Initialisation set the LE event mask to the host's default.
        syncState.eventsUnmasked = false
    }

    /// Disconnects every link, resets the controller and initialises it again.
    public func reset() async throws {
        try requireReady()
        setState(.resetting)
        // The controller forgets a connection attempt: it ends now (`BLEError.notReady`),
        // and the next waits for the reset to end.
        abandonConnect(BLEError.notReady(.resetting), cancel: false)
        await acquireConnectSlot()
        defer { releaseConnectSlot() }
        for c in links.active.values { _ = try? await disconnect(c, reason: .remoteUserTerminatedConnection) }
        // The controller forgets its syncs and periodic trains.
        endSyncs(closed: nil)
        peripheralState.periodicOnAir.removeAll()
        do {
            let i = try await controller.initialize(reset: true, extendedAdvertising: extendedPolicy == .automatic)
            adopt(i)
            try await startPrivacy(i)
            if let d = preferredPHYs { try await controller.send(LESetDefaultPHY(txPHYs: PHY.bits(d.tx), rxPHYs: PHY.bits(d.rx))) }
            if let d = preferredDataLength { try await controller.send(d) }
            // The controller forgot every set, and the links that stopped some are gone,
            // and its Filter Accept List is empty, and it does not scan.
            centralState.controllerAcceptList = nil
            centralState.scanning = nil
            centralState.cancelsOwed = 0
            centralState.unclaimed.removeAll()
            peripheralState.advertisingLinks.removeAll()
            peripheralState.linksAwaitingSet.removeAll()
            peripheralState.linksHoldingNothing.removeAll()
            // Advertising and scanning through the accept list come back with it (here,
            // as the reset holds the connect slot `holdAcceptList` would want).
            if peripheralState.advertising.values.contains(where: { !$0.filter.isEmpty }) || centralState.scans.values.contains(where: \.settings.acceptListOnly) {
                try await fillFilterAcceptList(centralState.acceptList)
            }
            for s in peripheralState.advertising.keys.sorted() {
                try await withAdvertisingLock { if let a = peripheralState.advertising[s] { try await startAdvertisingNow(a, set: s) } }
            }
            // The scans go on.
            try await withScanLock { try await reconcileScan(strict: false) }
            setState(.ready)
        } catch {
            setState(.failed("\(error)"))
            throw error
        }
    }

    /// Closes the transport: every link ends, every stream finishes. What the host
    /// owes or is doing goes out first: traffic owed by streams the application let go
    /// of (a scan stop, a CCCD write), and its reaction to a link that came or went
    /// (advertising resumed), so a recording ends at the same place every run. Returns
    /// once the host's own tasks have ended: nothing of the host runs on its loop after.
    public func close() async {
        await settle()
        await quiesce()
        await controller.close()
        await transportEnded()
        // The host's tasks have ended (`transportEnded` cancelled them, here or, if it
        // got there first, in the task that waits for the transport's end, which this
        // waits for too): nothing holds the host, and none
        // reaches its loop after this (the loop's owner may shut it down once `close`
        // returns).
        for t in tasks { await t.value }
        // And what an event taken meanwhile left to do (its commands fail at once now).
        await quiesce()
    }

    /// Ends the session the way a person quitting expects, then closes: every scan
    /// stops (its stream finishes), advertising stops, every link is disconnected
    /// (Remote User Terminated Connection) and its Disconnection Complete awaited, all
    /// within `limit`; a controller that does not answer does not keep the host open.
    /// `btctl` calls it on SIGINT and SIGTERM. Without links, scans or advertising it is
    /// `close()`.
    public func shutdown(within limit: Duration = .seconds(2)) async {
        if state == .ready {
            await settle()
            let deadline = loop.now + TimeAmount(limit)
            // Every scan at once: the controller stops (ended one by one, the scans left
            // could have it start again with other parameters).
            let scans = centralState.scans
            centralState.scans.removeAll()
            try? await withScanLock { try await reconcileScan(strict: false) }
            for id in scans.keys.sorted() { scans[id]?.continuation.finish() }
            for s in peripheralState.advertising.keys.sorted(by: >) { try? await setAdvertising(nil, set: s) }
            let links = links.active.values.sorted { $0.handle < $1.handle }
            for c in links { _ = try? await controller.send(Disconnect(connectionHandle: c.handle)) }
            for c in links {
                let left = deadline - loop.now
                guard left > .zero else { break }
                _ = await end(of: c.id, within: Duration(left))
            }
        }
        await close()
    }

    func transportEnded() async {
        if case .transportClosed = state { return }
        let reason = await controller.closedReason ?? "closed"
        setState(.transportClosed(reason))
        own.timer?.cancel()
        own.timer = nil
        peripheralState.cancelLegacyAdvertisingTimer()
        let gone = links.active.values
        links.active.removeAll()
        for c in gone { linkEnded(c, .transportClosed(reason)) }
        for c in gone {
            endSubscriptions(of: c)
            server.onLoop(c.handle) { $0.detach(connection: $1) }
        }
        if let w = centralState.connectWaiter {
            centralState.connectWaiter = nil
            w.timer.cancel()
            w.continuation.resume(throwing: BLEError.transportClosed(reason))
        }
        for (_, s) in centralState.scans { s.continuation.finish() }
        centralState.scans.removeAll()
        centralState.scanning = nil
        flushDraining()
        endSyncs(closed: reason)
        peripheralState.requestContinuation?.finish()
        for w in peripheralState.writers.values { w.writer?.queue.fail(BLEError.transportClosed(reason), alsoDropped: 0) }
        peripheralState.writers.removeAll()
        stateBroadcast.finish()
        connectionBroadcast.finish()
        peripheralBroadcast.finish()
        linkOutcomes.finish()
        // The host's own tasks (the one waiting for the transport's end, the one taking
        // EATT channels) would wait for what can no longer come, holding this host and
        // through it the whole stack: they end here. (The layers' events reach the host
        // through observers: no task follows them.)
        for t in tasks { t.cancel() }
    }

    // MARK: Events

    /// The loop's time since `epoch`.
    var now: Duration { Duration(loop.now - epoch) }

    /// Takes the controller's events and answers as they arrive, on the loop, in the
    /// controller's order (no stream between: nothing to fall behind or drop): the
    /// L2CAP host's event observer hands over every event after it handled it (a new
    /// link is known there first), the controller's answer observer the answers to the
    /// scan commands (`finishDrained`) and the advertising enables (`advertisingEnableAnswered`).
    /// Returns a stream that finishes when the transport has ended (the L2CAP host's
    /// close observer), for the task that ends the host then (one of `tasks`, which
    /// `close()` waits for).
    func followController() async -> BufferedStream<Never> {
        let (ended, end) = BufferedStream<Never>.makeStream(capacity: 1)
        await l2cap.addEventObserver { [weak self] e in self?.taking { h in if let rest = h.take(e) { h.react(rest) } } }
        await l2cap.addLinkObserver { [weak self] e in self?.taking { h in if let rest = h.take(e) { h.react(rest) } } }
        await controller.addAnswerObserver { [weak self] command, outcome in self?.taking { $0.answered(command, outcome) } }
        await l2cap.addCloseObserver { end.finish() }
        return ended
    }

    /// Runs `body` on the host, from a layer's observer: synchronously, on the loop the
    /// layers share with the host (every layer emits there; a call off it does nothing).
    nonisolated func taking(_ body: (isolated BluetoothHost) -> Void) {
        guard loop.inEventLoop else { return }
        onLoop(body)
    }

    /// A controller event, and what it leaves to do after (awaited: the test's way in).
    func handle(_ event: HCIEvent) async {
        if let rest = take(event) { await rest() }
    }

    /// Runs what a controller's or link's event left to do that waits, in a task of
    /// its own; `close()` waits for it (`quiesce`).
    func react(_ rest: @escaping @Sendable () async -> Void) {
        reacting += 1
        Task {
            await rest()
            reacted()
        }
    }

    private func reacted() {
        reacting -= 1
        guard reacting == 0 else { return }
        let waiters = quietWaiters
        quietWaiters.removeAll()
        for w in waiters { w.resume() }
    }

    /// The answer to a command of the host's: the scan enables' are counted (a windowed
    /// scan that ended takes the reports that came before its stop's answer), the
    /// advertising enables' counted per set.
    func answered(_ command: CommandFlow.Entry, _ outcome: CommandFlow.Outcome) {
        switch command.opcode {
        case .leSetScanEnable, .leSetExtendedScanEnable:
            centralState.scanAnswersSeen += 1
            finishDrained()
        case .leSetExtendedAdvertisingEnable:
            advertisingEnableAnswered(command, outcome)
        default:
            break
        }
    }

    /// A controller event, taken as it arrives; returns what is left to do that waits
    /// (a set to start again), for a task of its own.
    func take(_ event: HCIEvent) -> (@Sendable () async -> Void)? {
        switch event {
        case let .le(.advertisingReport(r)):
            for rp in r.reports { received(Advertisement(rp)) }
        case let .le(.extendedAdvertisingReport(r)):
            for rp in r.reports { if let a = centralState.assembler.add(rp) { received(a) } }
        case let .le(.periodicAdvertisingSyncEstablished(e)):
            syncEstablished(e)
        case let .le(.periodicAdvertisingReport(r)):
            periodicReport(r)
        case let .le(.periodicAdvertisingSyncLost(l)):
            syncLost(l.syncHandle)
        // Advertising Timeout ends directed advertising, never a connection attempt.
        case let .le(.connectionComplete(c)) where c.status == .advertisingTimeout:
            directedAdvertisingTimedOut()
        case let .le(.enhancedConnectionComplete(c)) where c.status == .advertisingTimeout:
            directedAdvertisingTimedOut()
        case let .le(.connectionComplete(c)) where !c.status.isSuccess:
            connectFailed(c.peerAddress, c.status, role: c.role)
        case let .le(.enhancedConnectionComplete(c)) where !c.status.isSuccess:
            connectFailed(c.peerAddress, c.status, role: c.role)
        case let .le(.advertisingSetTerminated(t)):
            guard usesExtendedCommands else { break }
            if t.status.isSuccess {
                return advertisingSetConnected(t)
            } else if endsReplacedEnabling(t.advertisingHandle) {
                // Its duration or event limit ended an advertisement being replaced
                // (the application's change, a new private address, a restart): the
                // set's new enabling goes on air.
                logger.debug("advertising set's earlier enabling ended", metadata: ["ble.advertisingSet": "\(t.advertisingHandle)"])
            } else {
                // Its duration or event limit ended it.
                advertisingSetTerminated(t)
            }
        case let .hardwareError(h):
            setState(.failed("hardware error 0x\(hex2(h.hardwareCode))"))
        default:
            break
        }
        return nil
    }

    /// One advertising PDU: into the registry, and to every scan whose filter the device's merged view matches.
    func received(_ a: Advertisement) {
        let who = identity(of: a.address, type: a.addressType)
        let d = registry.record(a, at: now, identity: who)
        guard !centralState.scans.isEmpty || !centralState.draining.isEmpty else { return }
        let result = ScanResult(advertisement: a, device: d)
        // Filters look at what the device said in its advertisement and scan response together.
        let merged = Advertisement(address: a.address, addressType: a.addressType, rssi: a.rssi, eventType: a.eventType, data: d.merged, raw: a.raw)
        // A scan through the accept list gets its devices alone, also while the
        // controller scans for all (another scan asks for all).
        // (Read here: `offer` below runs inside an exclusive access to the scans.)
        let acceptList = centralState.acceptList
        lazy var listed = acceptList.contains { e in
            func names(_ address: BluetoothAddress, _ type: AddressType) -> Bool { address == e.address && type.rawValue & 1 == e.type.rawValue & 1 }
            return names(a.address, a.addressType) || who.map { names($0.address, $0.type) } == true
        }
        // Each scan gets the PHYs it asked for (the controller scans every PHY any asks for).
        // (Primary_PHY is LE 1M or LE Coded; any other value a controller sends counts as LE 1M.)
        let phy: UInt8 = a.primaryPHY == PHY.leCoded.rawValue ? 0x04 : 0x01
        func offer(_ s: inout ScanSubscriber) {
            guard s.filter.matches(merged), s.settings.phys & phy != 0, s.settings.active || !a.isScanResponse, !s.settings.acceptListOnly || listed,
                  s.passesDuplicateFilter(a) else { return }
            s.continuation.yield(result)
        }
        // In place (a copy of the keys to walk would copy the scans at the first change).
        var i = centralState.scans.values.startIndex
        while i != centralState.scans.values.endIndex {
            offer(&centralState.scans.values[i])
            centralState.scans.values.formIndex(after: &i)
        }
        for i in centralState.draining.indices { offer(&centralState.draining[i].subscriber) }
    }

    func connectFailed(_ peer: BluetoothAddress, _ status: HCIStatus, role: ConnectionRole) {
        // A link the controller failed to make as peripheral (a central's attempt to
        // reach our advertising) is no attempt of ours. A controller that clears a failed
        // event's fields (Zephyr's does) says central, so only a stated peripheral role
        // is set aside.
        guard role == .central else {
            logger.debug("a connection as peripheral failed", metadata: ["ble.peer": "\(peer)", "hci.status": "\(status)"])
            return
        }
        // Unknown Connection Identifier follows our own LE Create Connection Cancel: the
        // end of an attempt abandoned before, not of the one that may be under way now.
        if status == .unknownConnectionIdentifier, centralState.cancelsOwed > 0 {
            centralState.cancelsOwed -= 1
            return
        }
        guard let w = centralState.connectWaiter else { return }
        centralState.connectWaiter = nil
        w.timer.cancel()
        // The peer the controller names, when it is one of those the connect is to.
        let named = w.peers.first { $0.address == peer } ?? w.peers[0]
        w.continuation.resume(throwing: BLEError.connectionFailed(named.address, status))
    }

}
