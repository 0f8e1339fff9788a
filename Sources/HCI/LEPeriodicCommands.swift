// LE periodic advertising and synchronisation to it (Core Specification v5.4, Vol 4,
// Part E, §7.8.61–§7.8.63 on the advertiser, §7.8.67–§7.8.69 on the scanner; the
// events are in LEMetaEvent.swift). A periodic train rides on an advertising set
// whose extended advertising is neither connectable nor scannable; a scanner hears
// the set's SyncInfo while scanning and then follows the train by its timing.

/// LE Set Periodic Advertising Parameters [v1] (§7.8.61). Intervals in 1.25 ms
/// (0x0006–0xFFFF, 7.5 ms to 81.91875 s).
public struct LESetPeriodicAdvertisingParameters: HCICommand {
    public static let opcode = HCIOpcode.leSetPeriodicAdvertisingParameters
    public var advertisingHandle: UInt8
    public var periodicAdvertisingIntervalMin: UInt16
    public var periodicAdvertisingIntervalMax: UInt16
    /// Bit 6: include TxPower in the periodic PDUs.
    public var periodicAdvertisingProperties: UInt16
    public init(advertisingHandle: UInt8, periodicAdvertisingIntervalMin: UInt16, periodicAdvertisingIntervalMax: UInt16,
                periodicAdvertisingProperties: UInt16 = 0) {
        self.advertisingHandle = advertisingHandle
        self.periodicAdvertisingIntervalMin = periodicAdvertisingIntervalMin
        self.periodicAdvertisingIntervalMax = periodicAdvertisingIntervalMax
        self.periodicAdvertisingProperties = periodicAdvertisingProperties
    }
    public func encodeParameters(into w: inout ByteWriter) {
        w.write(advertisingHandle); w.write(periodicAdvertisingIntervalMin); w.write(periodicAdvertisingIntervalMax)
        w.write(periodicAdvertisingProperties)
    }
    public init(parameters r: inout ByteReader) throws {
        advertisingHandle = try r.readUInt8("Advertising_Handle")
        periodicAdvertisingIntervalMin = try r.readUInt16("Periodic_Advertising_Interval_Min")
        periodicAdvertisingIntervalMax = try r.readUInt16("Periodic_Advertising_Interval_Max")
        periodicAdvertisingProperties = try r.readUInt16("Periodic_Advertising_Properties")
    }
}

/// LE Set Periodic Advertising Data (§7.8.62): handle, operation (0 intermediate,
/// 1 first, 2 last, 3 complete, 4 unchanged), length, data (≤ 252 per command).
public struct LESetPeriodicAdvertisingData: HCICommand {
    public static let opcode = HCIOpcode.leSetPeriodicAdvertisingData
    /// Largest data one command carries (255 parameter octets less handle, operation, length).
    public static let maximumFragmentLength = 252
    public var advertisingHandle: UInt8
    public var operation: UInt8
    public var data: [UInt8]
    public init(advertisingHandle: UInt8, operation: UInt8 = 3, data: [UInt8]) {
        self.advertisingHandle = advertisingHandle
        self.operation = operation
        self.data = data
    }
    public func encodeParameters(into w: inout ByteWriter) {
        w.write(advertisingHandle); w.write(operation)
        let d = data.prefix(Self.maximumFragmentLength)
        w.write(UInt8(d.count)); w.write(contentsOf: d)
    }
    public init(parameters r: inout ByteReader) throws {
        advertisingHandle = try r.readUInt8("Advertising_Handle")
        operation = try r.readUInt8("Operation")
        let n = Int(try r.readUInt8("Advertising_Data_Length"))
        data = try r.readBytes(n, "Advertising_Data")
    }

    /// `data` in commands for set `handle`, of at most 252 octets each (see `advertisingDataFragments`).
    public static func fragments(_ data: [UInt8], handle: UInt8) -> [LESetPeriodicAdvertisingData] {
        advertisingDataFragments(data, maximum: maximumFragmentLength).map {
            LESetPeriodicAdvertisingData(advertisingHandle: handle, operation: $0.operation, data: $0.data)
        }
    }
}

/// Advertising data in pieces of at most `maximum` octets with the Operation each
/// carries (§7.8.54, §7.8.62): one complete (3), or first (1), intermediate (0)…, last (2).
public func advertisingDataFragments(_ data: [UInt8], maximum n: Int) -> [(operation: UInt8, data: [UInt8])] {
    guard data.count > n else { return [(3, data)] }
    return stride(from: 0, to: data.count, by: n).map { i in
        (i == 0 ? 1 : (i + n >= data.count ? 2 : 0), Array(data[i..<min(data.count, i + n)]))
    }
}

/// LE Set Periodic Advertising Enable (§7.8.63). Enable bit 0: on; bit 1: include the ADI.
public struct LESetPeriodicAdvertisingEnable: HCICommand {
    public static let opcode = HCIOpcode.leSetPeriodicAdvertisingEnable
    public var enable: UInt8
    public var advertisingHandle: UInt8
    public init(enable: Bool, advertisingHandle: UInt8) {
        self.enable = enable ? 1 : 0
        self.advertisingHandle = advertisingHandle
    }
    public func encodeParameters(into w: inout ByteWriter) { w.write(enable); w.write(advertisingHandle) }
    public init(parameters r: inout ByteReader) throws {
        enable = try r.readUInt8("Enable")
        advertisingHandle = try r.readUInt8("Advertising_Handle")
    }
}

/// LE Periodic Advertising Create Sync (§7.8.67). Answered with Command Status; the
/// outcome is LE Periodic Advertising Sync Established. Options bit 0: use the
/// Periodic Advertiser List; bit 1: reporting initially disabled; bit 2: duplicate
/// filtering. Skip: periodic events the scanner may skip; Sync_Timeout in 10 ms
/// (0x000A–0x4000, 100 ms to 163.84 s).
public struct LEPeriodicAdvertisingCreateSync: HCICommand {
    public static let opcode = HCIOpcode.lePeriodicAdvertisingCreateSync
    public static let completesWithStatus = true
    public var options: UInt8
    public var advertisingSID: UInt8
    /// 0x00 public device or identity address, 0x01 random device or identity address.
    public var advertiserAddressType: AddressType
    public var advertiserAddress: BluetoothAddress
    public var skip: UInt16
    public var syncTimeout: UInt16
    /// Bits 0–4: do not sync to trains with (AoA, AoD 1 µs, AoD 2 µs, type 3) CTEs, or without one.
    public var syncCTEType: UInt8
    public init(options: UInt8 = 0, advertisingSID: UInt8, advertiserAddressType: AddressType, advertiserAddress: BluetoothAddress,
                skip: UInt16 = 0, syncTimeout: UInt16, syncCTEType: UInt8 = 0) {
        self.options = options
        self.advertisingSID = advertisingSID
        self.advertiserAddressType = advertiserAddressType
        self.advertiserAddress = advertiserAddress
        self.skip = skip
        self.syncTimeout = syncTimeout
        self.syncCTEType = syncCTEType
    }
    public func encodeParameters(into w: inout ByteWriter) {
        w.write(options); w.write(advertisingSID); w.write(advertiserAddressType.rawValue); advertiserAddress.encode(into: &w)
        w.write(skip); w.write(syncTimeout); w.write(syncCTEType)
    }
    public init(parameters r: inout ByteReader) throws {
        options = try r.readUInt8("Options")
        advertisingSID = try r.readUInt8("Advertising_SID")
        advertiserAddressType = AddressType(rawValue: try r.readUInt8("Advertiser_Address_Type"))
        advertiserAddress = try BluetoothAddress(from: &r)
        skip = try r.readUInt16("Skip")
        syncTimeout = try r.readUInt16("Sync_Timeout")
        syncCTEType = try r.readUInt8("Sync_CTE_Type")
    }
}

/// LE Periodic Advertising Create Sync Cancel (§7.8.68). When it succeeds, LE Periodic
/// Advertising Sync Established follows with Operation Cancelled by Host.
public struct LEPeriodicAdvertisingCreateSyncCancel: HCIParameterlessCommand {
    public static let opcode = HCIOpcode.lePeriodicAdvertisingCreateSyncCancel
    public init() {}
}

/// LE Periodic Advertising Terminate Sync (§7.8.69).
public struct LEPeriodicAdvertisingTerminateSync: HCICommand {
    public static let opcode = HCIOpcode.lePeriodicAdvertisingTerminateSync
    public var syncHandle: UInt16
    public init(syncHandle: UInt16) { self.syncHandle = syncHandle }
    public func encodeParameters(into w: inout ByteWriter) { w.write(syncHandle) }
    public init(parameters r: inout ByteReader) throws { syncHandle = try r.readUInt16("Sync_Handle") }
}

/// The parameters of the Periodic Advertiser List's entry commands (§7.8.70,
/// §7.8.71): an advertiser and one of its sets. The list names the trains an LE
/// Periodic Advertising Create Sync with Options bit 0 may synchronise to, whichever
/// the controller finds first; it may change only while no Create Sync is pending.
public protocol LEPeriodicAdvertiserListEntryCommand: HCICommand {
    /// 0x00 public device or identity address, 0x01 random device or identity address.
    var advertiserAddressType: AddressType { get }
    var advertiserAddress: BluetoothAddress { get }
    var advertisingSID: UInt8 { get }
    init(advertiserAddressType: AddressType, advertiserAddress: BluetoothAddress, advertisingSID: UInt8)
}

extension LEPeriodicAdvertiserListEntryCommand {
    public func encodeParameters(into w: inout ByteWriter) {
        w.write(advertiserAddressType.rawValue); advertiserAddress.encode(into: &w); w.write(advertisingSID)
    }
    public init(parameters r: inout ByteReader) throws {
        let t = AddressType(rawValue: try r.readUInt8("Advertiser_Address_Type"))
        let a = try BluetoothAddress(from: &r)
        self.init(advertiserAddressType: t, advertiserAddress: a, advertisingSID: try r.readUInt8("Advertising_SID"))
    }
}

/// LE Add Device To Periodic Advertiser List (§7.8.70). Memory Capacity Exceeded when
/// the list is full; Invalid HCI Command Parameters when the entry is already there.
public struct LEAddDeviceToPeriodicAdvertiserList: LEPeriodicAdvertiserListEntryCommand {
    public static let opcode = HCIOpcode.leAddDeviceToPeriodicAdvertiserList
    public var advertiserAddressType: AddressType
    public var advertiserAddress: BluetoothAddress
    public var advertisingSID: UInt8
    public init(advertiserAddressType: AddressType, advertiserAddress: BluetoothAddress, advertisingSID: UInt8) {
        self.advertiserAddressType = advertiserAddressType
        self.advertiserAddress = advertiserAddress
        self.advertisingSID = advertisingSID
    }
}

/// LE Remove Device From Periodic Advertiser List (§7.8.71). Unknown Advertising
/// Identifier when the entry is not there.
public struct LERemoveDeviceFromPeriodicAdvertiserList: LEPeriodicAdvertiserListEntryCommand {
    public static let opcode = HCIOpcode.leRemoveDeviceFromPeriodicAdvertiserList
    public var advertiserAddressType: AddressType
    public var advertiserAddress: BluetoothAddress
    public var advertisingSID: UInt8
    public init(advertiserAddressType: AddressType, advertiserAddress: BluetoothAddress, advertisingSID: UInt8) {
        self.advertiserAddressType = advertiserAddressType
        self.advertiserAddress = advertiserAddress
        self.advertisingSID = advertisingSID
    }
}

/// LE Clear Periodic Advertiser List (§7.8.72).
public struct LEClearPeriodicAdvertiserList: HCIParameterlessCommand {
    public static let opcode = HCIOpcode.leClearPeriodicAdvertiserList
    public init() {}
}

/// LE Read Periodic Advertiser List Size (§7.8.73): how many entries the list holds.
public struct LEReadPeriodicAdvertiserListSize: HCIParameterlessCommand {
    public typealias ReturnParameters = HCIOctetReturn
    public static let opcode = HCIOpcode.leReadPeriodicAdvertiserListSize
    public init() {}
}

/// LE Periodic Advertising Sync Established [v1] (§7.7.65.14).
public struct LEPeriodicAdvertisingSyncEstablished: HCIEventParameters {
    public var status: HCIStatus
    public var syncHandle: UInt16
    public var advertisingSID: UInt8
    public var advertiserAddressType: AddressType
    public var advertiserAddress: BluetoothAddress
    public var advertiserPHY: UInt8
    /// In 1.25 ms units.
    public var periodicAdvertisingInterval: UInt16
    public var advertiserClockAccuracy: UInt8
    public init(status: HCIStatus = .success, syncHandle: UInt16, advertisingSID: UInt8, advertiserAddressType: AddressType,
                advertiserAddress: BluetoothAddress, advertiserPHY: UInt8 = 1, periodicAdvertisingInterval: UInt16,
                advertiserClockAccuracy: UInt8 = 0) {
        self.status = status
        self.syncHandle = syncHandle
        self.advertisingSID = advertisingSID
        self.advertiserAddressType = advertiserAddressType
        self.advertiserAddress = advertiserAddress
        self.advertiserPHY = advertiserPHY
        self.periodicAdvertisingInterval = periodicAdvertisingInterval
        self.advertiserClockAccuracy = advertiserClockAccuracy
    }
    public init(parameters r: inout ByteReader) throws {
        status = HCIStatus(rawValue: try r.readUInt8("Status"))
        syncHandle = try r.readUInt16("Sync_Handle")
        advertisingSID = try r.readUInt8("Advertising_SID")
        advertiserAddressType = AddressType(rawValue: try r.readUInt8("Advertiser_Address_Type"))
        advertiserAddress = try BluetoothAddress(from: &r)
        advertiserPHY = try r.readUInt8("Advertiser_PHY")
        periodicAdvertisingInterval = try r.readUInt16("Periodic_Advertising_Interval")
        advertiserClockAccuracy = try r.readUInt8("Advertiser_Clock_Accuracy")
    }
    public func encode(into w: inout ByteWriter) {
        w.write(status.rawValue); w.write(syncHandle); w.write(advertisingSID); w.write(advertiserAddressType.rawValue)
        advertiserAddress.encode(into: &w); w.write(advertiserPHY); w.write(periodicAdvertisingInterval); w.write(advertiserClockAccuracy)
    }
}

/// LE Periodic Advertising Report [v1] (§7.7.65.15): one periodic PDU's data, or a
/// piece of it (Data_Status 1: more to come; 2: truncated, no more; 0: complete).
public struct LEPeriodicAdvertisingReport: HCIEventParameters {
    /// The most data one report carries: 255 parameter octets less the subevent code
    /// and the report's 7 fixed octets.
    public static let maximumDataLength = 247
    public var syncHandle: UInt16
    /// 127: not available.
    public var txPower: Int8
    /// 127: not available.
    public var rssi: Int8
    /// 0xFF: no Constant Tone Extension.
    public var cteType: UInt8
    public var dataStatus: UInt8
    public var data: [UInt8]
    public init(syncHandle: UInt16, txPower: Int8 = 127, rssi: Int8, cteType: UInt8 = 0xFF, dataStatus: UInt8 = 0, data: [UInt8]) {
        self.syncHandle = syncHandle
        self.txPower = txPower
        self.rssi = rssi
        self.cteType = cteType
        self.dataStatus = dataStatus
        self.data = data
    }
    public init(parameters r: inout ByteReader) throws {
        syncHandle = try r.readUInt16("Sync_Handle")
        txPower = try r.readInt8("TX_Power")
        rssi = try r.readInt8("RSSI")
        cteType = try r.readUInt8("CTE_Type")
        dataStatus = try r.readUInt8("Data_Status")
        let n = Int(try r.readUInt8("Data_Length"))
        data = try r.readBytes(n, "Data")
    }
    public func encode(into w: inout ByteWriter) {
        w.write(syncHandle); w.write(txPower); w.write(rssi); w.write(cteType); w.write(dataStatus)
        w.write(UInt8(truncatingIfNeeded: data.count)); w.write(contentsOf: data)
    }
}

/// LE Periodic Advertising Sync Lost (§7.7.65.16): no periodic PDU within Sync_Timeout.
public struct LEPeriodicAdvertisingSyncLost: HCIEventParameters {
    public var syncHandle: UInt16
    public init(syncHandle: UInt16) { self.syncHandle = syncHandle }
    public init(parameters r: inout ByteReader) throws { syncHandle = try r.readUInt16("Sync_Handle") }
    public func encode(into w: inout ByteWriter) { w.write(syncHandle) }
}
