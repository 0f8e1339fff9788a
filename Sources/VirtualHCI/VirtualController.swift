// One software LE controller on a `VirtualRadio`, seen by its host as an
// `HCITransport`. It answers the LE host's working set (the commands its
// Supported_Commands mask lists) and "Unknown HCI Command" for the rest, like a
// real controller. Buffers: 8 LE ACL packets of 251 bytes, returned with Number Of
// Completed Packets as soon as the radio has relayed them (a test can hold them
// back: `holdACL`); on air a link carries 27
// octets per PDU until LE Set Data Length raises it (up to 251).
//
// A controller made with extended advertising also has the Bluetooth 5 commands:
// advertising sets (VirtualAdvertising.swift), extended scanning with reports split
// as a controller splits them, LE Extended Create Connection, and the events that go
// with them (LE Enhanced Connection Complete and LE Advertising Set Terminated when
// the host unmasked them). Legacy and extended advertising commands do not mix until
// Reset (Vol 4, Part E, §3.1.1): the second kind is refused with Command Disallowed.
// Periodic advertising and synchronisation to it: VirtualPeriodicSync.swift.

import BLECrypto
import HCI
import NIOCore
import Synchronization

public actor VirtualController: HCITransport, LoopIsolated {
    public nonisolated let address: BluetoothAddress
    /// Controller-to-host packets for a host that reads the stream instead of using
    /// `deliver(on:_:)` (HCIController does the latter). Buffer: the newest 65,536
    /// packets; `droppedInbound` counts the rest.
    public nonisolated let inbound: AsyncThrowingStream<HCIPacket, any Error>
    public nonisolated let droppedInbound = DropCounter()
    private let continuation: AsyncThrowingStream<HCIPacket, any Error>.Continuation
    /// Where packets go once the host asked for loop delivery (`deliver(on:_:)`).
    private nonisolated let outbox = LoopOutbox()
    /// Host-to-controller packets from a host on another loop (`hostLoop`), handed to
    /// this controller's loop in order, in one batch per loop turn: the in-process
    /// counterpart of a UART between a host's core and its controller.
    private nonisolated let inbox = LoopOutbox()
    /// Set by `close()`: a host on another loop learns of it without a hop.
    private nonisolated let isClosed = Atomic<Bool>(false)
    weak var radio: VirtualRadio?
    /// The radio's loop: this controller's executor, and the loop its host prefers.
    public nonisolated let loop: any EventLoop
    /// The loop's actors' executor (held here: `unownedExecutor` does not keep it).
    public nonisolated let loopExecutor: LoopExecutor
    public nonisolated let unownedExecutor: UnownedSerialExecutor
    /// The loop this controller's host should run on: the radio's (one thread, the same
    /// order every run) unless the controller was made with a host loop of its own.
    public nonisolated let hostLoop: any EventLoop
    public nonisolated var preferredLoop: (any EventLoop)? { hostLoop }
    private var closed = false

    /// Advertising transmit power in dBm (also what LE Read Advertising Physical Channel Tx Power says).
    public var txPower: Int8 = 0
    var randomAddress: BluetoothAddress?
    /// Set Event Mask Page 2 enabled Encryption Change [v2].
    private var encryptionChangeV2 = false
    /// Whether this controller has the Bluetooth 5 extended advertising, scanning and
    /// connection commands (LE feature bit 12 and the commands in its mask).
    public nonisolated let supportsExtendedAdvertising: Bool
    /// LE Encryption, Connection Parameters Request Procedure, LE Data Packet Length
    /// Extension (and, as a Bluetooth 5 controller, LE 2M PHY, LE Extended and Periodic
    /// Advertising).
    nonisolated var leFeatures: UInt64 {
        let base: UInt64 = 1 << UInt64(LEFeatures.encryption) | 1 << UInt64(LEFeatures.connectionParametersRequest)
            | 1 << UInt64(LEFeatures.dataPacketLengthExtension)
        let extended: UInt64 = 1 << UInt64(LEFeatures.extendedAdvertising) | 1 << UInt64(LEFeatures.periodicAdvertising)
            | 1 << UInt64(LEFeatures.le2MPHY) | 1 << UInt64(LEFeatures.leCodedPHY)
        return base | (supportsExtendedAdvertising ? extended : 0)
    }
    /// The legacy commands' Advertising_Type, as event properties.
    private var legacyProperties: UInt16 = 0x13
    private var legacyPeerAddress: BluetoothAddress = .zero
    /// Which legacy enabling this is: a high duty cycle timer ends only the one that armed it.
    private var legacyRuns: UInt64 = 0
    private var ownAddressType: AddressType = .public
    /// The legacy advertising's Advertising_Filter_Policy (§7.8.5).
    var legacyFilterPolicy: UInt8 = 0
    /// Own_Address_Type of the scan (§7.8.10, §7.8.64): where its scan requests come from.
    var scanningAddressType: AddressType = .public
    /// Scanning_Filter_Policy (§7.8.10, §7.8.64): bit 0, only the advertisers on the
    /// Filter Accept List are reported (bit 1, a directed PDU's resolvable target, does
    /// not arise here: this controller resolves no addresses).
    var scanningFilterPolicy: UInt8 = 0
    private var advertisingData: [UInt8] = []
    private var scanResponseData: [UInt8] = []
    /// Legacy advertising (LE Set Advertising Enable) is on.
    public private(set) var isAdvertising = false
    var sets = AdvertisingSets()
    /// Which kind of advertising commands the host has used since Reset.
    private enum CommandKind { case legacy, extended }
    private var commandKind: CommandKind?
    /// LE_Event_Mask (§7.8.1); the default until the host sets it.
    var leEventMask: UInt64 = 0x1F
    var scanning = false
    var isScanning: Bool { scanning }
    /// Scanning was enabled with LE Set Extended Scan Enable: reports are extended.
    var extendedScan = false
    var activeScan = false
    var filterDuplicates = false
    var seen: Set<ReportedPDU> = []
    public private(set) var pendingConnection: BluetoothAddress?
    /// The own address type of the pending LE Create Connection.
    private var initiatingAddressType: AddressType = .public
    /// The pending connection came from LE Extended Create Connection (it reaches extended advertising too).
    private(set) var initiatingExtended = false
    /// Initiating_PHYs of the pending connection (bits: 0 LE 1M, 1 LE 2M, 2 LE Coded;
    /// LE Create Connection initiates on LE 1M).
    private(set) var initiatingPHYs: UInt8 = 0x01
    /// The connection parameters of the pending connection, one per bit of `initiatingPHYs`.
    private var initiatingParameters: [LEConnectionParameters] = []
    /// Scanning_PHYs (§7.8.64; LE Set Scan Parameters scans on LE 1M): a scanner hears
    /// the advertisements whose primary PHY it scans.
    var scanningPHYs: UInt8 = 0x01
    // `@exclusivity(unchecked)` below: state on the loop alone, and no access to it calls
    // out while under way (docs/architecture.md, "Decisions worth knowing").
    @exclusivity(unchecked) private var connections = HandleMap<BluetoothAddress>()
    /// The Filter Accept List (§7.8.16), in the order entries were added.
    var filterAcceptList: [FilterAcceptListEntry] = []
    /// The pending connection uses the Filter Accept List (Initiator_Filter_Policy 1).
    private(set) var initiatingWithList = false
    /// The LE Periodic Advertising Create Sync waiting for its train.
    var pendingSync: LEPeriodicAdvertisingCreateSync?
    /// Trains this controller is synchronised to, by Sync_Handle.
    var syncs: [UInt16: Sync] = [:]
    var syncRuns: UInt64 = 0
    /// The Periodic Advertiser List (§7.8.70), in the order entries were added.
    var periodicAdvertiserList: [PeriodicAdvertiserEntry] = []
    /// The PHYs this controller prefers (LE Set Default PHY), as a peer's PHY update meets them.
    var defaultPHYs: (tx: UInt8, rx: UInt8) = (VirtualController.supportedPHYs, VirtualController.supportedPHYs)
    /// TX octets and time its host suggested for new links (LE Write Suggested Default
    /// Data Length), as written: a link's sender sends what fits (`VirtualDataLength`).
    var suggestedDataLength: (octets: UInt16, time: UInt16) = (27, 328)


    /// LE Rand's generator (SplitMix64), seeded with the address: the same controller
    /// gives the same numbers in every run, as the radio's replays need.
    private lazy var randomState: UInt64 = address.value ^ 0x9E37_79B9_7F4A_7C15

    private func nextRandom() -> UInt64 {
        randomState &+= 0x9E37_79B9_7F4A_7C15
        var z = randomState
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    static let aclLength: UInt16 = 251
    static let aclCount: UInt8 = 8

    init(radio: VirtualRadio, loop: any EventLoop, hostLoop: (any EventLoop)? = nil, address: BluetoothAddress, extendedAdvertising: Bool = false) {
        self.radio = radio
        self.loop = loop
        self.hostLoop = hostLoop ?? loop
        self.loopExecutor = LoopExecutor.of(loop)
        self.unownedExecutor = loopExecutor.asUnownedSerialExecutor()
        self.address = address
        self.supportsExtendedAdvertising = extendedAdvertising
        self.implemented = Set(Self.legacyImplemented + (extendedAdvertising ? Self.extendedAdvertisingCommands : []))
        self.supportedCommands = SupportedCommands(claiming: implemented).bytes
        (inbound, continuation) = AsyncThrowingStream<HCIPacket, any Error>.makeStream(bufferingPolicy: .bufferingNewest(65_536))
    }

    /// Opens the inbox for a host on another loop: its batches run on this controller's
    /// loop, each packet handled as `sendNow` on the loop would. The inbox holds this
    /// controller until `close()` ends it; opened after that, it ends at once.
    private nonisolated func attachInbox() {
        inbox.attach(loop: loop) { [self] input in
            guard case let .packets(packets) = input else { return }
            onLoop(packets) { c, packets in
                guard !c.closed else { return }
                for p in packets { c.accept(p) }
            }
        }
        if isClosed.load(ordering: .acquiring) { _ = inbox.end() }
    }

    /// From a host on another loop (`hostLoop`, or one a host chose with
    /// `HCIController(loop:)`): queued for this controller's loop, in order. The inbox
    /// opens on the first such packet, so a controller whose host shares its loop never
    /// holds itself through one.
    private nonisolated func sendFromAnotherLoop(_ p: HCIPacket) throws(TransportError) {
        guard !isClosed.load(ordering: .acquiring) else { throw TransportError.closed }
        if inbox.put(p) { return }
        attachInbox()
        guard inbox.put(p) else { throw TransportError.closed }
    }

    /// The opcodes this controller implements; its Supported_Commands mask lists exactly these.
    nonisolated let implemented: Set<HCIOpcode>
    nonisolated let supportedCommands: [UInt8]

    /// The legacy advertising commands (§3.1.1 of Part E): refused once an extended one was used.
    static let legacyAdvertisingCommands: Set<HCIOpcode> = [
        .leSetAdvertisingParameters, .leReadAdvertisingPhysicalChannelTxPower, .leSetAdvertisingData, .leSetScanResponseData,
        .leSetAdvertisingEnable, .leSetScanParameters, .leSetScanEnable, .leCreateConnection,
    ]

    /// The extended advertising, scanning and connection commands.
    static let extendedAdvertisingCommands: [HCIOpcode] = [
        .leSetAdvertisingSetRandomAddress, .leSetExtendedAdvertisingParameters, .leSetExtendedAdvertisingData,
        .leSetExtendedScanResponseData, .leSetExtendedAdvertisingEnable, .leReadMaximumAdvertisingDataLength,
        .leReadNumberOfSupportedAdvertisingSets, .leRemoveAdvertisingSet, .leClearAdvertisingSets,
        .leSetExtendedScanParameters, .leSetExtendedScanEnable, .leExtendedCreateConnection,
        .leSetPeriodicAdvertisingParameters, .leSetPeriodicAdvertisingData, .leSetPeriodicAdvertisingEnable,
        .lePeriodicAdvertisingCreateSync, .lePeriodicAdvertisingCreateSyncCancel, .lePeriodicAdvertisingTerminateSync,
        .leAddDeviceToPeriodicAdvertiserList, .leRemoveDeviceFromPeriodicAdvertiserList, .leClearPeriodicAdvertiserList,
        .leReadPeriodicAdvertiserListSize, .leSetDefaultPHY, .leSetPHY, .leReadPHY,
    ]

    static let legacyImplemented: [HCIOpcode] = [
        .reset, .readLocalVersionInformation, .readLocalSupportedCommands, .readLocalSupportedFeatures, .readBDADDR,
        .readBufferSize, .setEventMask, .setEventMaskPage2, .leSetEventMask, .leReadBufferSize, .leReadLocalSupportedFeatures,
        .leReadSupportedStates, .leSetRandomAddress, .leSetAdvertisingParameters, .leReadAdvertisingPhysicalChannelTxPower,
        .leSetAdvertisingData, .leSetScanResponseData, .leSetAdvertisingEnable, .leSetScanParameters, .leSetScanEnable,
        .leCreateConnection, .leCreateConnectionCancel, .disconnect, .leConnectionUpdate, .readRSSI,
        .leReadRemoteFeatures, .readRemoteVersionInformation, .leSetDataLength, .leReadSuggestedDefaultDataLength,
        .leWriteSuggestedDefaultDataLength, .leReadMaximumDataLength, .leReadFilterAcceptListSize,
        .leClearFilterAcceptList, .leAddDeviceToFilterAcceptList, .leRemoveDeviceFromFilterAcceptList,
        .leEnableEncryption, .leLongTermKeyRequestReply, .leLongTermKeyRequestNegativeReply, .leEncrypt, .leRand,
    ]


    // MARK: HCITransport

    @exclusivity(unchecked) private var queue: [HCIPacket] = []
    @exclusivity(unchecked) private var processing = false

    /// Accepts a host packet; packets are handled strictly in the order sent, each to
    /// completion (the actor is reentrant while it waits on the radio).
    public func send(_ packet: HCIPacket) async throws {
        guard !closed else { throw TransportError.closed }
        try await send(Optional(packet))
    }

    /// From a host on this controller's loop: ACL data is relayed at once (when no
    /// command is being handled before it), commands are handled in order as by `send`.
    public nonisolated var sendsSynchronously: Bool { true }

    public nonisolated func sendNow(_ packets: [HCIPacket]) throws {
        guard loop.inEventLoop else {
            for p in packets { try sendFromAnotherLoop(p) }
            return
        }
        try onLoop(packets) { c, packets throws(TransportError) in
            guard !c.closed else { throw TransportError.closed }
            for p in packets { c.accept(p) }
        }
    }

    public nonisolated func sendNow(_ packet: HCIPacket) throws {
        guard loop.inEventLoop else { return try sendFromAnotherLoop(packet) }
        try onLoop(packet) { c, p throws(TransportError) in
            guard !c.closed else { throw TransportError.closed }
            c.accept(p)
        }
    }

    private func accept(_ p: HCIPacket) {
        if case let .acl(a) = p, !processing, queue.isEmpty {
            aclNow(a)
            return
        }
        queue.append(p)
        guard !processing else { return }
        Task { try? await self.send(nil) }
    }

    /// Handles the queue in order (with `packet` appended first, if any).
    private func send(_ packet: HCIPacket?) async throws {
        if let packet { queue.append(packet) }
        guard !processing else { return }
        processing = true
        while !queue.isEmpty {
            switch queue.removeFirst() {
            case let .command(opcode, parameters): await command(opcode, parameters)
            case let .acl(p): aclNow(p)
            default: break
            }
        }
        processing = false
    }

    public func close() async {
        guard !closed else { return }
        closed = true
        isClosed.store(true, ordering: .releasing)
        _ = inbox.end()
        if !outbox.end() { continuation.finish() }
    }

    /// Packets go to the host's loop: those emitted before the loop runs are handed over together.
    public nonisolated func deliver(on loop: any EventLoop, _ receive: @escaping @Sendable (TransportInput) -> Void) {
        outbox.attach(loop: loop, receive)
    }

    func emit(_ e: HCIEvent) { emit(e.packet) }
    func emit(_ p: HCIPacket) {
        guard !closed else { return }
        if !outbox.put(p), case .dropped = continuation.yield(p) { droppedInbound.increment() }
    }

    func complete<R: HCIReturnParameters>(_ op: HCIOpcode, _ r: R) {
        emit(.commandComplete(CommandComplete(commandOpcode: op, returning: r)))
    }
    func complete(_ op: HCIOpcode, status: HCIStatus = .success) {
        emit(.commandComplete(CommandComplete(commandOpcode: op, returnParameters: [status.rawValue])))
    }
    func status(_ op: HCIOpcode, _ s: HCIStatus = .success) { emit(.commandStatus(CommandStatus(status: s, commandOpcode: op))) }

    // MARK: Commands

    private func command(_ op: HCIOpcode, _ params: [UInt8]) async {
        guard implemented.contains(op) else { return complete(op, status: .unknownCommand) }
        if supportsExtendedAdvertising {
            // Legacy and extended advertising commands do not mix until Reset.
            let kind: CommandKind? = Self.legacyAdvertisingCommands.contains(op) ? .legacy
                : Self.extendedAdvertisingCommands.contains(op) ? .extended : nil
            if let kind {
                guard commandKind == nil || commandKind == kind else { return refuse(op, .commandDisallowed) }
                commandKind = kind
            }
        }
        do {
            try await handle(op, params)
        } catch {
            // Malformed parameters: what a controller answers.
            refuse(op, .invalidCommandParameters)
        }
    }

    /// Fails `op` with `s`, in the event the command ends with (Command Status or Complete).
    private func refuse(_ op: HCIOpcode, _ s: HCIStatus) {
        if let t = HCICommandRegistry.types[op], t.completesWithStatus { status(op, s) } else { complete(op, status: s) }
    }

    private func handle(_ op: HCIOpcode, _ p: [UInt8]) async throws {
        switch op {
        case .reset:
            isAdvertising = false; scanning = false; pendingConnection = nil; advertisingData = []; scanResponseData = []
            let trainsEnded = sets.anyPeriodic
            sets.reset(); commandKind = nil; leEventMask = 0x1F; extendedScan = false
            pendingSync = nil; syncs.removeAll(); periodicAdvertiserList.removeAll(); filterAcceptList.removeAll()
            defaultPHYs = (Self.supportedPHYs, Self.supportedPHYs)
            legacyFilterPolicy = 0; scanningAddressType = .public; scanningFilterPolicy = 0; scanningPHYs = 0x01
            suggestedDataLength = (27, 328)
            complete(op)
            if trainsEnded { await radio?.periodicTrainsEnded(self) }
        case .readLocalVersionInformation:
            complete(op, ReadLocalVersionInformation.ReturnParameters(hciVersion: 13, hciSubversion: 0, lmpVersion: 13, companyIdentifier: 0xFFFF, lmpSubversion: 0))
        case .readLocalSupportedCommands:
            complete(op, ReadLocalSupportedCommands.ReturnParameters(supportedCommands: SupportedCommands(bytes: supportedCommands)))
        case .readLocalSupportedFeatures:
            complete(op, ReadLocalSupportedFeatures.ReturnParameters(lmpFeatures: 1 << 38 | 1 << 37))
        case .readBDADDR:
            complete(op, ReadBDADDR.ReturnParameters(address: address))
        case .readBufferSize:
            complete(op, ReadBufferSize.ReturnParameters(aclDataPacketLength: Self.aclLength, synchronousDataPacketLength: 0, totalNumACLDataPackets: UInt16(Self.aclCount), totalNumSynchronousDataPackets: 0))
        case .leReadBufferSize:
            complete(op, LEReadBufferSize.ReturnParameters(leACLDataPacketLength: Self.aclLength, totalNumLEACLDataPackets: Self.aclCount))
        case .leReadLocalSupportedFeatures:
            complete(op, HCIMask64Return(mask: leFeatures))
        case .leReadSupportedStates:
            complete(op, HCIMask64Return(mask: 0x3FF_FFFF_FFFF))
        case .leEncrypt:
            // Wire order is least significant octet first; AES-128 takes FIPS-197's order.
            let c = try LEEncrypt.decode(p)
            let encrypted = try BLECrypto.e(key: c.key.reversed(), c.plaintextData.reversed())
            complete(op, LEEncrypt.ReturnParameters(encryptedData: encrypted.reversed()))
        case .leRand:
            complete(op, LERand.ReturnParameters(randomNumber: nextRandom()))
        case .setEventMaskPage2:
            encryptionChangeV2 = try SetEventMaskPage2.decode(p).eventMaskPage2 & SetEventMaskPage2.encryptionChangeV2 != 0
            complete(op)
        case .leSetEventMask:
            leEventMask = try LESetEventMask.decode(p).leEventMask
            complete(op)
        case .setEventMask:
            complete(op)
        case .leClearFilterAcceptList, .leAddDeviceToFilterAcceptList, .leRemoveDeviceFromFilterAcceptList, .leReadFilterAcceptListSize:
            try handleFilterAcceptList(op, p)
        case .leSetRandomAddress:
            // §7.8.4: not while legacy advertising, scanning or initiating.
            guard !isAdvertising, !scanning, pendingConnection == nil else { return complete(op, status: .commandDisallowed) }
            randomAddress = try LESetRandomAddress.decode(p).randomAddress
            complete(op)
        case .leSetAdvertisingParameters:
            let c = try LESetAdvertisingParameters.decode(p)
            guard !isAdvertising else { return complete(op, status: .commandDisallowed) }
            guard let properties = AirAdvertisement.properties(legacyType: c.advertisingType) else { return complete(op, status: .invalidCommandParameters) }
            guard c.advertisingFilterPolicy <= 3 else { return complete(op, status: .invalidCommandParameters) }
            legacyProperties = properties
            legacyPeerAddress = c.peerAddress
            ownAddressType = c.ownAddressType
            legacyFilterPolicy = c.advertisingFilterPolicy
            complete(op)
        case .leReadAdvertisingPhysicalChannelTxPower:
            complete(op, HCIOctetReturn(value: UInt8(bitPattern: txPower)))
        case .leSetAdvertisingData:
            advertisingData = try LESetAdvertisingData.decode(p).data
            complete(op)
        case .leSetScanResponseData:
            scanResponseData = try LESetScanResponseData.decode(p).data
            complete(op)
        case .leSetAdvertisingEnable:
            let on = try LESetAdvertisingEnable.decode(p).advertisingEnable
            let starting = on && !isAdvertising
            isAdvertising = on
            complete(op)
            if starting, legacyProperties == 0x1D {
                // High duty cycle directed advertising: 1.28 s at most (§7.8.9).
                legacyRuns += 1
                let run = legacyRuns
                _ = LoopTimer(after: .milliseconds(1_280), on: loop) { [weak self] in
                    self?.onLoop { $0.highDutyCycleElapsed(run: run) }
                }
            }
            if starting { await radio?.advertisingStarted(self) }
        case .leSetScanParameters:
            let c = try LESetScanParameters.decode(p)
            // §7.8.10: not while scanning.
            guard !scanning else { return complete(op, status: .commandDisallowed) }
            guard c.scanningFilterPolicy <= 3 else { return complete(op, status: .invalidCommandParameters) }
            scanningPHYs = 0x01
            activeScan = c.scanType == 1
            scanningAddressType = c.ownAddressType
            scanningFilterPolicy = c.scanningFilterPolicy
            complete(op)
        case .leSetScanEnable:
            let c = try LESetScanEnable.decode(p)
            await setScanning(op, c.scanEnable, filterDuplicates: c.filterDuplicates, extended: false)
        case .leCreateConnection:
            let c = try LECreateConnection.decode(p)
            await initiate(op, to: c.peerAddress, ownAddressType: c.ownAddressType, extended: false, policy: c.initiatorFilterPolicy, phys: 0x01,
                           scans: [(c.scanInterval, c.scanWindow)], parameters: [c.connection])
        case .leCreateConnectionCancel:
            guard pendingConnection != nil else { return complete(op, status: .commandDisallowed) }
            pendingConnection = nil
            complete(op)
            emitConnectionComplete(LEEnhancedConnectionComplete(status: .unknownConnectionIdentifier, connectionHandle: 0, role: .central,
                                                                peerAddressType: .public, peerAddress: .zero))
        case .disconnect:
            let c = try Disconnect.decode(p)
            guard connections[c.connectionHandle] != nil else { return status(op, .unknownConnectionIdentifier) }
            status(op)
            _ = await radio?.disconnect(self, handle: c.connectionHandle, reason: c.reason)
        case .leConnectionUpdate:
            let c = try LEConnectionUpdate.decode(p)
            guard connections[c.connectionHandle] != nil else { return status(op, .unknownConnectionIdentifier) }
            status(op)
            await radio?.connectionUpdated(self, handle: c.connectionHandle, interval: c.connection.connectionIntervalMax,
                                           latency: c.connection.maxLatency, timeout: c.connection.supervisionTimeout)
        case .readRSSI:
            let c = try ReadRSSI.decode(p)
            guard connections[c.connectionHandle] != nil, let radio, let peer = await radio.peer(of: self, handle: c.connectionHandle) else {
                return complete(op, status: .unknownConnectionIdentifier)
            }
            complete(op, ReadRSSI.ReturnParameters(connectionHandle: c.connectionHandle, rssi: await radio.rssi(from: peer, to: self)))
        case .leReadRemoteFeatures:
            let c = try LEReadRemoteFeatures.decode(p)
            guard connections[c.connectionHandle] != nil else { return status(op, .unknownConnectionIdentifier) }
            status(op)
            // The peer's controller's features, as the link layer's feature exchange gives them.
            let theirs = await radio?.peer(of: self, handle: c.connectionHandle)?.leFeatures ?? 0
            emit(.le(.readRemoteFeaturesComplete(LEReadRemoteFeaturesComplete(connectionHandle: c.connectionHandle, leFeatures: theirs))))
        case .readRemoteVersionInformation:
            let c = try ReadRemoteVersionInformation.decode(p)
            guard connections[c.connectionHandle] != nil else { return status(op, .unknownConnectionIdentifier) }
            status(op)
            emit(.readRemoteVersionInformationComplete(ReadRemoteVersionInformationComplete(connectionHandle: c.connectionHandle, version: 13, companyIdentifier: 0xFFFF, subversion: 0)))
        case .leEnableEncryption:
            let c = try LEEnableEncryption.decode(p)
            guard connections[c.connectionHandle] != nil, let radio else { return status(op, .unknownConnectionIdentifier) }
            guard await radio.startEncryption(self, handle: c.connectionHandle, key: c.longTermKey, ediv: c.encryptedDiversifier, rand: c.randomNumber)
            else { return status(op, .commandDisallowed) }
            status(op)
            await radio.requestKey(self, handle: c.connectionHandle)
        case .leLongTermKeyRequestReply:
            let c = try LELongTermKeyRequestReply.decode(p)
            guard connections[c.connectionHandle] != nil, let radio else { return complete(op, status: .unknownConnectionIdentifier) }
            complete(op, HCIConnectionHandleReturn(connectionHandle: c.connectionHandle))
            await radio.keyReply(self, handle: c.connectionHandle, key: c.longTermKey)
        case .leLongTermKeyRequestNegativeReply:
            let c = try LELongTermKeyRequestNegativeReply.decode(p)
            guard connections[c.connectionHandle] != nil, let radio else { return complete(op, status: .unknownConnectionIdentifier) }
            complete(op, HCIConnectionHandleReturn(connectionHandle: c.connectionHandle))
            await radio.keyReply(self, handle: c.connectionHandle, key: nil)
        default:
            try await handleExtended(op, p)
        }
    }

    /// The extended advertising, scanning and connection commands.
    private func handleExtended(_ op: HCIOpcode, _ p: [UInt8]) async throws {
        switch op {
        case .leReadMaximumAdvertisingDataLength:
            complete(op, LEReadMaximumAdvertisingDataLength.ReturnParameters(maxAdvertisingDataLength: UInt16(AdvertisingSets.maximumDataLength)))
        case .leReadNumberOfSupportedAdvertisingSets:
            complete(op, HCIOctetReturn(value: UInt8(AdvertisingSets.capacity)))
        case .leSetExtendedAdvertisingParameters:
            switch sets.setParameters(try LESetExtendedAdvertisingParameters.decode(p), defaultTxPower: txPower) {
            case let .success(power): complete(op, HCIOctetReturn(value: UInt8(bitPattern: power)))
            case let .failure(s): complete(op, status: s)
            }
        case .leSetAdvertisingSetRandomAddress:
            let c = try LESetAdvertisingSetRandomAddress.decode(p)
            complete(op, status: sets.setRandomAddress(c.advertisingHandle, c.randomAddress))
        case .leSetExtendedAdvertisingData:
            complete(op, status: sets.setData(try LESetExtendedAdvertisingData.decode(p), scanResponse: false))
        case .leSetExtendedScanResponseData:
            complete(op, status: sets.setData(try LESetExtendedScanResponseData.decode(p), scanResponse: true))
        case .leSetExtendedAdvertisingEnable:
            let c = try LESetExtendedAdvertisingEnable.decode(p)
            let (s, started) = sets.enable(c)
            complete(op, status: s)
            guard s.isSuccess, c.enable else { break }
            for e in c.sets where e.duration != 0 {
                guard let run = sets.sets[e.advertisingHandle]?.run else { continue }
                let h = e.advertisingHandle
                _ = LoopTimer(after: .milliseconds(10 * Int(e.duration)), on: loop) { [weak self] in
                    self?.onLoop { $0.durationElapsed(h, run: run) }
                }
            }
            if !started.isEmpty {
                await radio?.advertisingStarted(self)
                // That was the started sets' first advertising event.
                advertisingEvent(started)
            }
        case .leRemoveAdvertisingSet:
            complete(op, status: sets.remove(try LERemoveAdvertisingSet.decode(p).advertisingHandle))
        case .leClearAdvertisingSets:
            complete(op, status: sets.clear())
        case .leSetExtendedScanParameters:
            let c = try LESetExtendedScanParameters.decode(p)
            // §7.8.64: not while scanning; PHYs it has (Rootcanal's order of checks).
            guard !scanning else { return complete(op, status: .commandDisallowed) }
            guard c.scanningPHYs & ~Self.supportedPHYs == 0 else { return complete(op, status: .unsupportedFeatureOrParameterValue) }
            guard c.scanningPHYs != 0 else { return complete(op, status: .invalidCommandParameters) }
            guard c.scanningFilterPolicy <= 3 else { return complete(op, status: .invalidCommandParameters) }
            scanningPHYs = c.scanningPHYs
            activeScan = c.phys.contains { $0.scanType == 1 }
            scanningAddressType = c.ownAddressType
            scanningFilterPolicy = c.scanningFilterPolicy
            complete(op)
        case .leSetExtendedScanEnable:
            let c = try LESetExtendedScanEnable.decode(p)
            guard !c.enable || c.filterDuplicates <= 2 else { return complete(op, status: .invalidCommandParameters) }
            await setScanning(op, c.enable, filterDuplicates: c.filterDuplicates != 0, extended: true)
        case .leExtendedCreateConnection:
            let c = try LEExtendedCreateConnection.decode(p)
            // PHYs it has (Rootcanal's order of checks); LE 2M alone finds no advertising.
            guard c.initiatingPHYs & ~Self.supportedPHYs == 0 else { return status(op, .unsupportedFeatureOrParameterValue) }
            guard c.initiatingPHYs != 0 else { return status(op, .invalidCommandParameters) }
            await initiate(op, to: c.peerAddress, ownAddressType: c.ownAddressType, extended: true, policy: c.initiatorFilterPolicy,
                           phys: c.initiatingPHYs, scans: c.phys.map { ($0.scanInterval, $0.scanWindow) }, parameters: c.phys.map(\.connection))
        case .leSetDefaultPHY, .leSetPHY, .leReadPHY:
            try await handlePHY(op, p)
        case .leSetDataLength, .leReadSuggestedDefaultDataLength, .leWriteSuggestedDefaultDataLength, .leReadMaximumDataLength:
            try await handleDataLength(op, p)
        default:
            try await handlePeriodic(op, p)
        }
    }

    /// LE Create Connection or its extended form: one attempt at a time, from a random
    /// address only once one is set; connects now if `peer` advertises connectably.
    /// `policy` (Initiator_Filter_Policy) 1: connect to any device on the Filter Accept
    /// List, `peer` ignored; 0: to `peer`. `scans` and `parameters`: one per PHY, checked
    /// in Rootcanal's order and with its statuses (a value out of range Unsupported Feature
    /// or Parameter Value, values that disagree Invalid HCI Command Parameters).
    private func initiate(_ op: HCIOpcode, to peer: BluetoothAddress, ownAddressType: AddressType, extended: Bool, policy: UInt8, phys: UInt8,
                          scans: [(interval: UInt16, window: UInt16)], parameters: [LEConnectionParameters]) async {
        guard pendingConnection == nil else { return status(op, .commandDisallowed) }
        for (scan, connection) in zip(scans, parameters) {
            let range: ClosedRange<UInt16> = 0x0004...0x4000
            guard range.contains(scan.interval), range.contains(scan.window) else { return status(op, .unsupportedFeatureOrParameterValue) }
            guard scan.window <= scan.interval else { return status(op, .invalidCommandParameters) }
            switch connection.fault {
            case .outOfRange?: return status(op, .unsupportedFeatureOrParameterValue)
            case .inconsistent?: return status(op, .invalidCommandParameters)
            case nil: break
            }
        }
        guard ownAddressType != .random || randomAddress != nil, policy <= 1 else { return status(op, .invalidCommandParameters) }
        pendingConnection = peer
        initiatingWithList = policy == 1
        initiatingAddressType = ownAddressType
        initiatingExtended = extended
        initiatingPHYs = phys
        initiatingParameters = parameters
        status(op)
        await radio?.createConnection(from: self)
    }

    /// The addresses the pending connection may go to: the Filter Accept List's when
    /// its policy uses it, else the one it names.
    /// The parameters a link the pending connection makes through an advertisement on
    /// primary PHY `phy` starts with: that PHY's entry (Rootcanal takes LE 1M's).
    func initiatingParameters(heardOn phy: UInt8) -> LEConnectionParameters {
        let i = (initiatingPHYs & (AirAdvertisement.bit(phy) &- 1)).nonzeroBitCount
        return initiatingParameters.indices.contains(i) ? initiatingParameters[i] : initiatingParameters.first ?? LEConnectionParameters()
    }

    var initiatingTargets: [BluetoothAddress] {
        guard let p = pendingConnection else { return [] }
        return initiatingWithList ? filterAcceptList.map(\.address) : [p]
    }

    // MARK: ACL

    /// ACL data the host sent while `holdACL` is on, in order: in this controller's
    /// buffers, not yet on air, so no Number Of Completed Packets for it yet.
    private var heldACL: [ACLDataPacket] = []
    private var holdingACL = false

    /// Keeps the ACL data the host sends in this controller's buffers (a link whose
    /// peer has stopped acknowledging, as a controller sees it) until `releaseACL`:
    /// the host's ACL credits run out and its senders wait. A link that ends meanwhile
    /// takes its held packets with it, as a controller flushes a link's buffers when
    /// it reports Disconnection Complete.
    public func holdACL() { holdingACL = true }

    /// Relays the held ACL data, in order, and stops holding.
    public func releaseACL() {
        holdingACL = false
        let held = heldACL
        heldACL = []
        for p in held { aclNow(p) }
    }

    /// Relays ACL data through the radio (on this loop, synchronously) and returns the buffer.
    private func aclNow(_ p: ACLDataPacket) {
        guard connections[p.handle] != nil, p.data.count <= Int(Self.aclLength), let radio else { return }
        if holdingACL {
            heldACL.append(p)
            return
        }
        if radio.onLoop((p, self), { $0.relay($1.0, from: $1.1) }) {
            // Number Of Completed Packets, one handle, one packet (encoded here: the
            // typed event would build its entry array and then its bytes).
            emit(.event(code: .numberOfCompletedPackets, parameters: [1, UInt8(truncatingIfNeeded: p.handle), UInt8(truncatingIfNeeded: p.handle >> 8), 1, 0]))
        }
    }

    // MARK: From the radio

    var advertisedAddress: (BluetoothAddress, AddressType) {
        if ownAddressType == .random, let r = randomAddress { return (r, .random) }
        return (address, .public)
    }

    /// The address a connection this controller initiates comes from.
    var initiatingAddress: (BluetoothAddress, AddressType) {
        if initiatingAddressType == .random, let r = randomAddress { return (r, .random) }
        return (address, .public)
    }

    /// What this controller has on air: its legacy advertising, then its enabled sets.
    var broadcasts: [AirAdvertisement] {
        var out: [AirAdvertisement] = []
        if isAdvertising {
            let (a, t) = advertisedAddress
            let directed = legacyProperties & 0x04 != 0
            out.append(AirAdvertisement(address: a, addressType: t, properties: legacyProperties, target: directed ? legacyPeerAddress : nil,
                                        data: directed ? [] : advertisingData, scanResponse: scanResponseData, sid: 0xFF, txPower: txPower, set: nil,
                                        filterPolicy: legacyFilterPolicy, acceptList: legacyFilterPolicy == 0 ? [] : filterAcceptList))
        }
        return out + sets.broadcasts(publicAddress: address, acceptList: filterAcceptList)
    }

    /// An advertising event of the enabled sets `handles` (all of them unless told):
    /// those that reached their Max_Extended_Advertising_Events end with Limit Reached.
    func advertisingEvent(_ handles: [UInt8]? = nil) {
        for (h, n) in sets.advertisingEvent(handles ?? sets.enabledHandles) {
            setTerminated(LEAdvertisingSetTerminated(status: .limitReached, advertisingHandle: h, connectionHandle: 0,
                                                     numCompletedExtendedAdvertisingEvents: UInt8(clamping: n)))
        }
    }

    /// A set's Duration elapsed: it ends with Advertising Timeout.
    private func durationElapsed(_ handle: UInt8, run: UInt64) {
        let highDuty = sets.sets[handle].map { $0.properties & 0x0D == 0x0D } ?? false
        guard let n = sets.durationElapsed(handle, run: run) else { return }
        // As Rootcanal: high duty cycle directed advertising that made no link also ends
        // with an LE Connection Complete of Advertising Timeout (§7.8.56 allows both).
        if highDuty { advertisingTimeout() }
        setTerminated(LEAdvertisingSetTerminated(status: .advertisingTimeout, advertisingHandle: handle, connectionHandle: 0,
                                                 numCompletedExtendedAdvertisingEvents: UInt8(clamping: n)))
    }

    /// Legacy high duty cycle directed advertising (enabling `run`) made no link in
    /// 1.28 s: it stops, with an LE Connection Complete of Advertising Timeout (§7.8.9).
    private func highDutyCycleElapsed(run: UInt64) {
        guard isAdvertising, legacyRuns == run, legacyProperties == 0x1D else { return }
        isAdvertising = false
        advertisingTimeout()
    }

    /// The LE (Enhanced) Connection Complete that ends directed advertising: Advertising
    /// Timeout, no handle, role central and a zero address, as Rootcanal sends it.
    private func advertisingTimeout() {
        emitConnectionComplete(LEEnhancedConnectionComplete(status: .advertisingTimeout, connectionHandle: 0, role: .central, peerAddressType: .public,
                                                            peerAddress: .zero, connectionInterval: 0, peripheralLatency: 0, supervisionTimeout: 0))
    }

    /// LE Advertising Set Terminated, when the host unmasked it (LE event mask bit 17).
    private func setTerminated(_ t: LEAdvertisingSetTerminated) {
        if leEventMask & 1 << 17 != 0 { emit(.le(.advertisingSetTerminated(t))) }
    }

    /// A link is up: LE (Enhanced) Connection Complete with the parameters it starts
    /// with, the maximum interval of those the central asked for (as Rootcanal takes it).
    func connected(handle: UInt16, role: ConnectionRole, peer: (BluetoothAddress, AddressType), set: UInt8? = nil, parameters: LEConnectionParameters) {
        connections[handle] = peer.0
        if role == .peripheral {
            if let set { sets.connected(set) } else { isAdvertising = false }
        } else {
            pendingConnection = nil
        }
        emitConnectionComplete(LEEnhancedConnectionComplete(connectionHandle: handle, role: role, peerAddressType: peer.1, peerAddress: peer.0,
                                                            connectionInterval: parameters.connectionIntervalMax, peripheralLatency: parameters.maxLatency,
                                                            supervisionTimeout: parameters.supervisionTimeout))
        // §7.7.65.18: after the connection's event, the set that it ended.
        if role == .peripheral, let set { setTerminated(LEAdvertisingSetTerminated(advertisingHandle: set, connectionHandle: handle)) }
    }

    /// LE Enhanced Connection Complete when this controller has it and the host
    /// unmasked it (§7.7.65.10: then never LE Connection Complete as well); else LE Connection Complete.
    private func emitConnectionComplete(_ c: LEEnhancedConnectionComplete) {
        if supportsExtendedAdvertising, leEventMask & 1 << 9 != 0 {
            emit(.le(.enhancedConnectionComplete(c)))
        } else {
            emit(.le(.connectionComplete(LEConnectionComplete(status: c.status, connectionHandle: c.connectionHandle, role: c.role,
                                                              peerAddressType: c.peerAddressType, peerAddress: c.peerAddress,
                                                              connectionInterval: c.connectionInterval, peripheralLatency: c.peripheralLatency,
                                                              supervisionTimeout: c.supervisionTimeout))))
        }
    }

    func deliver(_ p: ACLDataPacket) { emit(.acl(p)) }

    func longTermKeyRequested(handle: UInt16, ediv: UInt16, rand: UInt64) {
        emit(.le(.longTermKeyRequest(LELongTermKeyRequest(connectionHandle: handle, randomNumber: rand, encryptedDiversifier: ediv))))
    }

    /// Encryption started (Encryption Change) or, on a link already encrypted, the key
    /// was refreshed (Encryption Key Refresh Complete); or it failed with `status`.
    func encryptionChanged(handle: UInt16, status: HCIStatus, enabled: Bool, refresh: Bool) {
        if refresh && status.isSuccess {
            emit(.encryptionKeyRefreshComplete(EncryptionKeyRefreshComplete(connectionHandle: handle)))
        } else if encryptionChangeV2 {
            // An LE controller encrypts with the 128-bit LTK it is given (a shorter key
            // is the host's, zero-padded), so it reports 16 while encrypted.
            emit(.encryptionChangeV2(EncryptionChangeV2(status: status, connectionHandle: handle, encryptionEnabled: enabled ? 1 : 0,
                                                        encryptionKeySize: enabled && status.isSuccess ? 16 : 0)))
        } else {
            emit(.encryptionChange(EncryptionChange(status: status, connectionHandle: handle, encryptionEnabled: enabled ? 1 : 0)))
        }
    }

    func disconnected(handle: UInt16, reason: HCIStatus) {
        connections[handle] = nil
        heldACL.removeAll { $0.handle == handle }
        emit(.disconnectionComplete(DisconnectionComplete(connectionHandle: handle, reason: reason)))
    }

    func connectionUpdateComplete(handle: UInt16, interval: UInt16, latency: UInt16, timeout: UInt16) {
        emit(.le(.connectionUpdateComplete(LEConnectionUpdateComplete(connectionHandle: handle, connectionInterval: interval, peripheralLatency: latency, supervisionTimeout: timeout))))
    }

    public func setTxPower(_ dBm: Int8) { txPower = dBm }
}
