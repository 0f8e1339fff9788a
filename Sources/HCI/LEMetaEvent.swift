// LE Meta event subevents (Core Specification v5.4, Vol 4, Part E, §7.7.65).
// Multi-report subevents hold each report contiguously (type, address, data, RSSI),
// the layout controllers send and BlueZ and Bumble parse.

public enum LEMetaEvent: Hashable, Sendable {
    case connectionComplete(LEConnectionComplete)
    case advertisingReport(LEAdvertisingReport)
    case connectionUpdateComplete(LEConnectionUpdateComplete)
    case readRemoteFeaturesComplete(LEReadRemoteFeaturesComplete)
    case longTermKeyRequest(LELongTermKeyRequest)
    case dataLengthChange(LEDataLengthChange)
    case enhancedConnectionComplete(LEEnhancedConnectionComplete)
    case directedAdvertisingReport(LEDirectedAdvertisingReport)
    case phyUpdateComplete(LEPHYUpdateComplete)
    case extendedAdvertisingReport(LEExtendedAdvertisingReport)
    case periodicAdvertisingSyncEstablished(LEPeriodicAdvertisingSyncEstablished)
    case periodicAdvertisingReport(LEPeriodicAdvertisingReport)
    case periodicAdvertisingSyncLost(LEPeriodicAdvertisingSyncLost)
    case scanTimeout
    case advertisingSetTerminated(LEAdvertisingSetTerminated)
    case channelSelectionAlgorithm(LEChannelSelectionAlgorithm)
    case unknown(subevent: LESubeventCode, parameters: [UInt8])

    public init(parameters r: inout ByteReader) throws {
        let code = LESubeventCode(rawValue: try r.readUInt8("Subevent_Code"))
        r.context = code.description
        switch code {
        case .connectionComplete: self = .connectionComplete(try LEConnectionComplete(parameters: &r))
        case .advertisingReport: self = .advertisingReport(try LEAdvertisingReport(parameters: &r))
        case .connectionUpdateComplete: self = .connectionUpdateComplete(try LEConnectionUpdateComplete(parameters: &r))
        case .readRemoteFeaturesComplete: self = .readRemoteFeaturesComplete(try LEReadRemoteFeaturesComplete(parameters: &r))
        case .longTermKeyRequest: self = .longTermKeyRequest(try LELongTermKeyRequest(parameters: &r))
        case .dataLengthChange: self = .dataLengthChange(try LEDataLengthChange(parameters: &r))
        case .enhancedConnectionComplete:
            self = .enhancedConnectionComplete(try LEEnhancedConnectionComplete(parameters: &r, v2: false))
        case .enhancedConnectionCompleteV2:
            self = .enhancedConnectionComplete(try LEEnhancedConnectionComplete(parameters: &r, v2: true))
        case .directedAdvertisingReport: self = .directedAdvertisingReport(try LEDirectedAdvertisingReport(parameters: &r))
        case .phyUpdateComplete: self = .phyUpdateComplete(try LEPHYUpdateComplete(parameters: &r))
        case .extendedAdvertisingReport: self = .extendedAdvertisingReport(try LEExtendedAdvertisingReport(parameters: &r))
        case .periodicAdvertisingSyncEstablished:
            self = .periodicAdvertisingSyncEstablished(try LEPeriodicAdvertisingSyncEstablished(parameters: &r))
        case .periodicAdvertisingReport: self = .periodicAdvertisingReport(try LEPeriodicAdvertisingReport(parameters: &r))
        case .periodicAdvertisingSyncLost: self = .periodicAdvertisingSyncLost(try LEPeriodicAdvertisingSyncLost(parameters: &r))
        case .scanTimeout: self = .scanTimeout
        case .advertisingSetTerminated: self = .advertisingSetTerminated(try LEAdvertisingSetTerminated(parameters: &r))
        case .channelSelectionAlgorithm:
            self = .channelSelectionAlgorithm(try LEChannelSelectionAlgorithm(parameters: &r))
        default: self = .unknown(subevent: code, parameters: r.readRemaining())
        }
    }

    public var subevent: LESubeventCode {
        switch self {
        case .connectionComplete: return .connectionComplete
        case .advertisingReport: return .advertisingReport
        case .connectionUpdateComplete: return .connectionUpdateComplete
        case .readRemoteFeaturesComplete: return .readRemoteFeaturesComplete
        case .longTermKeyRequest: return .longTermKeyRequest
        case .dataLengthChange: return .dataLengthChange
        case let .enhancedConnectionComplete(e): return e.isV2 ? .enhancedConnectionCompleteV2 : .enhancedConnectionComplete
        case .directedAdvertisingReport: return .directedAdvertisingReport
        case .phyUpdateComplete: return .phyUpdateComplete
        case .extendedAdvertisingReport: return .extendedAdvertisingReport
        case .periodicAdvertisingSyncEstablished: return .periodicAdvertisingSyncEstablished
        case .periodicAdvertisingReport: return .periodicAdvertisingReport
        case .periodicAdvertisingSyncLost: return .periodicAdvertisingSyncLost
        case .scanTimeout: return .scanTimeout
        case .advertisingSetTerminated: return .advertisingSetTerminated
        case .channelSelectionAlgorithm: return .channelSelectionAlgorithm
        case let .unknown(code, _): return code
        }
    }

    public func encode(into w: inout ByteWriter) {
        w.write(subevent.rawValue)
        switch self {
        case let .connectionComplete(e): e.encode(into: &w)
        case let .advertisingReport(e): e.encode(into: &w)
        case let .connectionUpdateComplete(e): e.encode(into: &w)
        case let .readRemoteFeaturesComplete(e): e.encode(into: &w)
        case let .longTermKeyRequest(e): e.encode(into: &w)
        case let .dataLengthChange(e): e.encode(into: &w)
        case let .enhancedConnectionComplete(e): e.encode(into: &w)
        case let .directedAdvertisingReport(e): e.encode(into: &w)
        case let .phyUpdateComplete(e): e.encode(into: &w)
        case let .extendedAdvertisingReport(e): e.encode(into: &w)
        case let .periodicAdvertisingSyncEstablished(e): e.encode(into: &w)
        case let .periodicAdvertisingReport(e): e.encode(into: &w)
        case let .periodicAdvertisingSyncLost(e): e.encode(into: &w)
        case .scanTimeout: break
        case let .advertisingSetTerminated(e): e.encode(into: &w)
        case let .channelSelectionAlgorithm(e): e.encode(into: &w)
        case let .unknown(_, p): w.write(contentsOf: p)
        }
    }
}

/// 0x00 central, 0x01 peripheral.
public struct ConnectionRole: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public var rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }
    public static let central = ConnectionRole(rawValue: 0)
    public static let peripheral = ConnectionRole(rawValue: 1)
    public var description: String { rawValue == 0 ? "central" : rawValue == 1 ? "peripheral" : "unknown(\(rawValue))" }
}

/// LE Connection Complete (§7.7.65.1).
public struct LEConnectionComplete: HCIEventParameters {
    public var status: HCIStatus
    public var connectionHandle: UInt16
    public var role: ConnectionRole
    public var peerAddressType: AddressType
    public var peerAddress: BluetoothAddress
    public var connectionInterval: UInt16
    public var peripheralLatency: UInt16
    public var supervisionTimeout: UInt16
    public var centralClockAccuracy: UInt8
    public init(status: HCIStatus = .success, connectionHandle: UInt16, role: ConnectionRole, peerAddressType: AddressType,
                peerAddress: BluetoothAddress, connectionInterval: UInt16 = 0x0028, peripheralLatency: UInt16 = 0,
                supervisionTimeout: UInt16 = 0x01F4, centralClockAccuracy: UInt8 = 0) {
        self.status = status
        self.connectionHandle = connectionHandle
        self.role = role
        self.peerAddressType = peerAddressType
        self.peerAddress = peerAddress
        self.connectionInterval = connectionInterval
        self.peripheralLatency = peripheralLatency
        self.supervisionTimeout = supervisionTimeout
        self.centralClockAccuracy = centralClockAccuracy
    }
    public init(parameters r: inout ByteReader) throws {
        status = HCIStatus(rawValue: try r.readUInt8("Status"))
        connectionHandle = try r.readUInt16("Connection_Handle") & 0x0FFF
        role = ConnectionRole(rawValue: try r.readUInt8("Role"))
        peerAddressType = AddressType(rawValue: try r.readUInt8("Peer_Address_Type"))
        peerAddress = try BluetoothAddress(from: &r)
        connectionInterval = try r.readUInt16("Connection_Interval")
        peripheralLatency = try r.readUInt16("Peripheral_Latency")
        supervisionTimeout = try r.readUInt16("Supervision_Timeout")
        centralClockAccuracy = try r.readUInt8("Central_Clock_Accuracy")
    }
    public func encode(into w: inout ByteWriter) {
        w.write(status.rawValue); w.write(connectionHandle); w.write(role.rawValue); w.write(peerAddressType.rawValue)
        peerAddress.encode(into: &w); w.write(connectionInterval); w.write(peripheralLatency)
        w.write(supervisionTimeout); w.write(centralClockAccuracy)
    }
}

/// LE Enhanced Connection Complete [v1] (§7.7.65.10) and [v2] (§7.7.65.10, subevent 0x29).
public struct LEEnhancedConnectionComplete: HCIEventParameters {
    public var status: HCIStatus
    public var connectionHandle: UInt16
    public var role: ConnectionRole
    public var peerAddressType: AddressType
    public var peerAddress: BluetoothAddress
    public var localResolvablePrivateAddress: BluetoothAddress
    public var peerResolvablePrivateAddress: BluetoothAddress
    public var connectionInterval: UInt16
    public var peripheralLatency: UInt16
    public var supervisionTimeout: UInt16
    public var centralClockAccuracy: UInt8
    /// Present in v2 only: (Advertising_Handle, Sync_Handle).
    public var v2Fields: V2?
    public struct V2: Hashable, Sendable {
        public var advertisingHandle: UInt8
        public var syncHandle: UInt16
        public init(advertisingHandle: UInt8, syncHandle: UInt16) {
            self.advertisingHandle = advertisingHandle
            self.syncHandle = syncHandle
        }
    }
    public var isV2: Bool { v2Fields != nil }

    public init(status: HCIStatus = .success, connectionHandle: UInt16, role: ConnectionRole, peerAddressType: AddressType,
                peerAddress: BluetoothAddress, localResolvablePrivateAddress: BluetoothAddress = .zero,
                peerResolvablePrivateAddress: BluetoothAddress = .zero, connectionInterval: UInt16 = 0x0028,
                peripheralLatency: UInt16 = 0, supervisionTimeout: UInt16 = 0x01F4, centralClockAccuracy: UInt8 = 0, v2Fields: V2? = nil) {
        self.status = status
        self.connectionHandle = connectionHandle
        self.role = role
        self.peerAddressType = peerAddressType
        self.peerAddress = peerAddress
        self.localResolvablePrivateAddress = localResolvablePrivateAddress
        self.peerResolvablePrivateAddress = peerResolvablePrivateAddress
        self.connectionInterval = connectionInterval
        self.peripheralLatency = peripheralLatency
        self.supervisionTimeout = supervisionTimeout
        self.centralClockAccuracy = centralClockAccuracy
        self.v2Fields = v2Fields
    }
    public init(parameters r: inout ByteReader) throws { try self.init(parameters: &r, v2: false) }
    public init(parameters r: inout ByteReader, v2: Bool) throws {
        status = HCIStatus(rawValue: try r.readUInt8("Status"))
        connectionHandle = try r.readUInt16("Connection_Handle") & 0x0FFF
        role = ConnectionRole(rawValue: try r.readUInt8("Role"))
        peerAddressType = AddressType(rawValue: try r.readUInt8("Peer_Address_Type"))
        peerAddress = try BluetoothAddress(from: &r)
        localResolvablePrivateAddress = try BluetoothAddress(from: &r)
        peerResolvablePrivateAddress = try BluetoothAddress(from: &r)
        connectionInterval = try r.readUInt16("Connection_Interval")
        peripheralLatency = try r.readUInt16("Peripheral_Latency")
        supervisionTimeout = try r.readUInt16("Supervision_Timeout")
        centralClockAccuracy = try r.readUInt8("Central_Clock_Accuracy")
        v2Fields = v2 ? V2(advertisingHandle: try r.readUInt8("Advertising_Handle"), syncHandle: try r.readUInt16("Sync_Handle")) : nil
    }
    public func encode(into w: inout ByteWriter) {
        w.write(status.rawValue); w.write(connectionHandle); w.write(role.rawValue); w.write(peerAddressType.rawValue)
        peerAddress.encode(into: &w); localResolvablePrivateAddress.encode(into: &w); peerResolvablePrivateAddress.encode(into: &w)
        w.write(connectionInterval); w.write(peripheralLatency); w.write(supervisionTimeout); w.write(centralClockAccuracy)
        if let v2Fields { w.write(v2Fields.advertisingHandle); w.write(v2Fields.syncHandle) }
    }
}

/// LE Advertising Report (§7.7.65.2), one or more reports per event.
public struct LEAdvertisingReport: HCIEventParameters {
    public struct Report: Hashable, Sendable {
        /// 0 ADV_IND, 1 ADV_DIRECT_IND, 2 ADV_SCAN_IND, 3 ADV_NONCONN_IND, 4 SCAN_RSP.
        public var eventType: UInt8
        public var addressType: AddressType
        public var address: BluetoothAddress
        public var data: [UInt8]
        /// dBm; 127 means "not available".
        public var rssi: Int8
        public init(eventType: UInt8, addressType: AddressType, address: BluetoothAddress, data: [UInt8], rssi: Int8) {
            self.eventType = eventType
            self.addressType = addressType
            self.address = address
            self.data = data
            self.rssi = rssi
        }
    }
    public var reports: [Report]
    public init(reports: [Report]) { self.reports = reports }
    public init(parameters r: inout ByteReader) throws {
        let n = Int(try r.readUInt8("Num_Reports"))
        var reports: [Report] = []
        reports.reserveCapacity(n)
        for i in 0..<n {
            let t = try r.readUInt8("Event_Type[\(i)]")
            let at = AddressType(rawValue: try r.readUInt8("Address_Type[\(i)]"))
            let a = try BluetoothAddress(from: &r)
            let len = Int(try r.readUInt8("Data_Length[\(i)]"))
            guard len <= 31 else { throw DecodeError.invalidValue(what: "LE Advertising Report Data_Length[\(i)]", value: len) }
            let d = try r.readBytes(len, "Data[\(i)]")
            reports.append(Report(eventType: t, addressType: at, address: a, data: d, rssi: try r.readInt8("RSSI[\(i)]")))
        }
        self.reports = reports
    }
    public func encode(into w: inout ByteWriter) {
        w.write(UInt8(truncatingIfNeeded: reports.count))
        for rp in reports {
            w.write(rp.eventType); w.write(rp.addressType.rawValue); rp.address.encode(into: &w)
            w.write(UInt8(truncatingIfNeeded: rp.data.count)); w.write(contentsOf: rp.data); w.write(rp.rssi)
        }
    }
}

/// LE Directed Advertising Report (§7.7.65.11).
public struct LEDirectedAdvertisingReport: HCIEventParameters {
    public struct Report: Hashable, Sendable {
        public var eventType: UInt8
        public var addressType: AddressType
        public var address: BluetoothAddress
        public var directAddressType: AddressType
        public var directAddress: BluetoothAddress
        public var rssi: Int8
        public init(eventType: UInt8 = 1, addressType: AddressType, address: BluetoothAddress, directAddressType: AddressType,
                    directAddress: BluetoothAddress, rssi: Int8) {
            self.eventType = eventType
            self.addressType = addressType
            self.address = address
            self.directAddressType = directAddressType
            self.directAddress = directAddress
            self.rssi = rssi
        }
    }
    public var reports: [Report]
    public init(reports: [Report]) { self.reports = reports }
    public init(parameters r: inout ByteReader) throws {
        let n = Int(try r.readUInt8("Num_Reports"))
        var reports: [Report] = []
        for i in 0..<n {
            reports.append(Report(
                eventType: try r.readUInt8("Event_Type[\(i)]"),
                addressType: AddressType(rawValue: try r.readUInt8("Address_Type[\(i)]")),
                address: try BluetoothAddress(from: &r),
                directAddressType: AddressType(rawValue: try r.readUInt8("Direct_Address_Type[\(i)]")),
                directAddress: try BluetoothAddress(from: &r),
                rssi: try r.readInt8("RSSI[\(i)]")))
        }
        self.reports = reports
    }
    public func encode(into w: inout ByteWriter) {
        w.write(UInt8(truncatingIfNeeded: reports.count))
        for rp in reports {
            w.write(rp.eventType); w.write(rp.addressType.rawValue); rp.address.encode(into: &w)
            w.write(rp.directAddressType.rawValue); rp.directAddress.encode(into: &w); w.write(rp.rssi)
        }
    }
}

/// LE Extended Advertising Report (§7.7.65.13).
public struct LEExtendedAdvertisingReport: HCIEventParameters {
    public struct Report: Hashable, Sendable {
        /// Bits: 0 connectable, 1 scannable, 2 directed, 3 scan response, 4 legacy,
        /// 5–6 data status (0 complete, 1 incomplete more coming, 2 truncated).
        public var eventType: UInt16
        public var addressType: AddressType
        public var address: BluetoothAddress
        public var primaryPHY: UInt8
        public var secondaryPHY: UInt8
        public var advertisingSID: UInt8
        public var txPower: Int8
        public var rssi: Int8
        public var periodicAdvertisingInterval: UInt16
        public var directAddressType: AddressType
        public var directAddress: BluetoothAddress
        public var data: [UInt8]
        public init(eventType: UInt16, addressType: AddressType, address: BluetoothAddress, primaryPHY: UInt8 = 1,
                    secondaryPHY: UInt8 = 0, advertisingSID: UInt8 = 0xFF, txPower: Int8 = 127, rssi: Int8,
                    periodicAdvertisingInterval: UInt16 = 0, directAddressType: AddressType = .public,
                    directAddress: BluetoothAddress = .zero, data: [UInt8]) {
            self.eventType = eventType
            self.addressType = addressType
            self.address = address
            self.primaryPHY = primaryPHY
            self.secondaryPHY = secondaryPHY
            self.advertisingSID = advertisingSID
            self.txPower = txPower
            self.rssi = rssi
            self.periodicAdvertisingInterval = periodicAdvertisingInterval
            self.directAddressType = directAddressType
            self.directAddress = directAddress
            self.data = data
        }
    }
    public var reports: [Report]
    public init(reports: [Report]) { self.reports = reports }
    public init(parameters r: inout ByteReader) throws {
        let n = Int(try r.readUInt8("Num_Reports"))
        var reports: [Report] = []
        for i in 0..<n {
            let et = try r.readUInt16("Event_Type[\(i)]")
            let at = AddressType(rawValue: try r.readUInt8("Address_Type[\(i)]"))
            let a = try BluetoothAddress(from: &r)
            let p1 = try r.readUInt8("Primary_PHY[\(i)]")
            let p2 = try r.readUInt8("Secondary_PHY[\(i)]")
            let sid = try r.readUInt8("Advertising_SID[\(i)]")
            let tx = try r.readInt8("TX_Power[\(i)]")
            let rssi = try r.readInt8("RSSI[\(i)]")
            let pi = try r.readUInt16("Periodic_Advertising_Interval[\(i)]")
            let dat = AddressType(rawValue: try r.readUInt8("Direct_Address_Type[\(i)]"))
            let da = try BluetoothAddress(from: &r)
            let len = Int(try r.readUInt8("Data_Length[\(i)]"))
            let d = try r.readBytes(len, "Data[\(i)]")
            reports.append(Report(
                eventType: et, addressType: at, address: a, primaryPHY: p1, secondaryPHY: p2, advertisingSID: sid,
                txPower: tx, rssi: rssi, periodicAdvertisingInterval: pi, directAddressType: dat, directAddress: da, data: d))
        }
        self.reports = reports
    }
    public func encode(into w: inout ByteWriter) {
        w.write(UInt8(truncatingIfNeeded: reports.count))
        for rp in reports {
            w.write(rp.eventType); w.write(rp.addressType.rawValue); rp.address.encode(into: &w)
            w.write(rp.primaryPHY); w.write(rp.secondaryPHY); w.write(rp.advertisingSID); w.write(rp.txPower)
            w.write(rp.rssi); w.write(rp.periodicAdvertisingInterval); w.write(rp.directAddressType.rawValue)
            rp.directAddress.encode(into: &w); w.write(UInt8(truncatingIfNeeded: rp.data.count)); w.write(contentsOf: rp.data)
        }
    }
}

/// LE Connection Update Complete (§7.7.65.3).
public struct LEConnectionUpdateComplete: HCIEventParameters {
    public var status: HCIStatus
    public var connectionHandle: UInt16
    public var connectionInterval: UInt16
    public var peripheralLatency: UInt16
    public var supervisionTimeout: UInt16
    public init(status: HCIStatus = .success, connectionHandle: UInt16, connectionInterval: UInt16, peripheralLatency: UInt16, supervisionTimeout: UInt16) {
        self.status = status
        self.connectionHandle = connectionHandle
        self.connectionInterval = connectionInterval
        self.peripheralLatency = peripheralLatency
        self.supervisionTimeout = supervisionTimeout
    }
    public init(parameters r: inout ByteReader) throws {
        status = HCIStatus(rawValue: try r.readUInt8("Status"))
        connectionHandle = try r.readUInt16("Connection_Handle") & 0x0FFF
        connectionInterval = try r.readUInt16("Connection_Interval")
        peripheralLatency = try r.readUInt16("Peripheral_Latency")
        supervisionTimeout = try r.readUInt16("Supervision_Timeout")
    }
    public func encode(into w: inout ByteWriter) {
        w.write(status.rawValue); w.write(connectionHandle); w.write(connectionInterval)
        w.write(peripheralLatency); w.write(supervisionTimeout)
    }
}

/// LE Read Remote Features Complete (§7.7.65.4).
public struct LEReadRemoteFeaturesComplete: HCIEventParameters {
    public var status: HCIStatus
    public var connectionHandle: UInt16
    public var leFeatures: UInt64
    public init(status: HCIStatus = .success, connectionHandle: UInt16, leFeatures: UInt64) {
        self.status = status
        self.connectionHandle = connectionHandle
        self.leFeatures = leFeatures
    }
    public init(parameters r: inout ByteReader) throws {
        status = HCIStatus(rawValue: try r.readUInt8("Status"))
        connectionHandle = try r.readUInt16("Connection_Handle") & 0x0FFF
        leFeatures = try r.readUInt64("LE_Features")
    }
    public func encode(into w: inout ByteWriter) { w.write(status.rawValue); w.write(connectionHandle); w.write(leFeatures) }
}

/// LE Long Term Key Request (§7.7.65.5).
public struct LELongTermKeyRequest: HCIEventParameters {
    public var connectionHandle: UInt16
    public var randomNumber: UInt64
    public var encryptedDiversifier: UInt16
    public init(connectionHandle: UInt16, randomNumber: UInt64, encryptedDiversifier: UInt16) {
        self.connectionHandle = connectionHandle
        self.randomNumber = randomNumber
        self.encryptedDiversifier = encryptedDiversifier
    }
    public init(parameters r: inout ByteReader) throws {
        connectionHandle = try r.readUInt16("Connection_Handle") & 0x0FFF
        randomNumber = try r.readUInt64("Random_Number")
        encryptedDiversifier = try r.readUInt16("Encrypted_Diversifier")
    }
    public func encode(into w: inout ByteWriter) { w.write(connectionHandle); w.write(randomNumber); w.write(encryptedDiversifier) }
}

/// LE Data Length Change (§7.7.65.7).
public struct LEDataLengthChange: HCIEventParameters {
    public var connectionHandle: UInt16
    public var maxTxOctets: UInt16
    public var maxTxTime: UInt16
    public var maxRxOctets: UInt16
    public var maxRxTime: UInt16
    public init(connectionHandle: UInt16, maxTxOctets: UInt16, maxTxTime: UInt16, maxRxOctets: UInt16, maxRxTime: UInt16) {
        self.connectionHandle = connectionHandle
        self.maxTxOctets = maxTxOctets
        self.maxTxTime = maxTxTime
        self.maxRxOctets = maxRxOctets
        self.maxRxTime = maxRxTime
    }
    public init(parameters r: inout ByteReader) throws {
        connectionHandle = try r.readUInt16("Connection_Handle") & 0x0FFF
        maxTxOctets = try r.readUInt16("Max_TX_Octets")
        maxTxTime = try r.readUInt16("Max_TX_Time")
        maxRxOctets = try r.readUInt16("Max_RX_Octets")
        maxRxTime = try r.readUInt16("Max_RX_Time")
    }
    public func encode(into w: inout ByteWriter) {
        w.write(connectionHandle); w.write(maxTxOctets); w.write(maxTxTime); w.write(maxRxOctets); w.write(maxRxTime)
    }
}

/// LE PHY Update Complete (§7.7.65.12).
public struct LEPHYUpdateComplete: HCIEventParameters {
    public var status: HCIStatus
    public var connectionHandle: UInt16
    public var txPHY: UInt8
    public var rxPHY: UInt8
    public init(status: HCIStatus = .success, connectionHandle: UInt16, txPHY: UInt8, rxPHY: UInt8) {
        self.status = status
        self.connectionHandle = connectionHandle
        self.txPHY = txPHY
        self.rxPHY = rxPHY
    }
    public init(parameters r: inout ByteReader) throws {
        status = HCIStatus(rawValue: try r.readUInt8("Status"))
        connectionHandle = try r.readUInt16("Connection_Handle") & 0x0FFF
        txPHY = try r.readUInt8("TX_PHY")
        rxPHY = try r.readUInt8("RX_PHY")
    }
    public func encode(into w: inout ByteWriter) { w.write(status.rawValue); w.write(connectionHandle); w.write(txPHY); w.write(rxPHY) }
}

/// LE Advertising Set Terminated (§7.7.65.18).
public struct LEAdvertisingSetTerminated: HCIEventParameters {
    public var status: HCIStatus
    public var advertisingHandle: UInt8
    public var connectionHandle: UInt16
    public var numCompletedExtendedAdvertisingEvents: UInt8
    public init(status: HCIStatus = .success, advertisingHandle: UInt8, connectionHandle: UInt16, numCompletedExtendedAdvertisingEvents: UInt8 = 0) {
        self.status = status
        self.advertisingHandle = advertisingHandle
        self.connectionHandle = connectionHandle
        self.numCompletedExtendedAdvertisingEvents = numCompletedExtendedAdvertisingEvents
    }
    public init(parameters r: inout ByteReader) throws {
        status = HCIStatus(rawValue: try r.readUInt8("Status"))
        advertisingHandle = try r.readUInt8("Advertising_Handle")
        connectionHandle = try r.readUInt16("Connection_Handle") & 0x0FFF
        numCompletedExtendedAdvertisingEvents = try r.readUInt8("Num_Completed_Extended_Advertising_Events")
    }
    public func encode(into w: inout ByteWriter) {
        w.write(status.rawValue); w.write(advertisingHandle); w.write(connectionHandle); w.write(numCompletedExtendedAdvertisingEvents)
    }
}

/// LE Channel Selection Algorithm (§7.7.65.20).
public struct LEChannelSelectionAlgorithm: HCIEventParameters {
    public var connectionHandle: UInt16
    /// 0 algorithm #1, 1 algorithm #2.
    public var channelSelectionAlgorithm: UInt8
    public init(connectionHandle: UInt16, channelSelectionAlgorithm: UInt8) {
        self.connectionHandle = connectionHandle
        self.channelSelectionAlgorithm = channelSelectionAlgorithm
    }
    public init(parameters r: inout ByteReader) throws {
        connectionHandle = try r.readUInt16("Connection_Handle") & 0x0FFF
        channelSelectionAlgorithm = try r.readUInt8("Channel_Selection_Algorithm")
    }
    public func encode(into w: inout ByteWriter) { w.write(connectionHandle); w.write(channelSelectionAlgorithm) }
}
