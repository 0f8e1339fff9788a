// The known-device registry (FA03): every device seen or connected, with what its
// advertisements and scan responses said (merged), its RSSI (last and smoothed) and
// its connection state, kept across scans and reconnections. A value type: the
// owner (the facade's actor) decides where it lives; time is passed in.

import HCI

public struct KnownDevice: Hashable, Sendable {
    /// The address it was last seen or connected with (what to connect to).
    public var address: BluetoothAddress
    public var addressType: AddressType
    /// A bonded peer's identity address when one of its resolvable private addresses
    /// was resolved (with its IRK, or by the controller): every address it uses is this
    /// one device, kept under its identity.
    public var identity: BluetoothAddress?
    public var identityType: AddressType?
    /// The latest advertisement and scan response, as received.
    public var advertisement: AdvertisingData?
    public var scanResponse: AdvertisingData?
    public var lastRSSI: Int8?
    public var smoothedRSSI: Double? { filter.value }
    public var filter = RSSIFilter()
    public var firstSeen: Duration
    public var lastSeen: Duration
    public var reports = 0
    public var isConnectable = false
    /// The connection handle while connected.
    public var connection: UInt16?
    public var connectionCount = 0

    /// Advertisement and scan response together: the name, services, TX power and
    /// data from either (the advertisement wins where both say something).
    public var merged: AdvertisingData {
        var m = scanResponse ?? AdvertisingData()
        guard let a = advertisement else { return m }
        m.flags = a.flags ?? m.flags
        if let n = a.localName, !(a.nameIsShortened && m.localName != nil && !m.nameIsShortened) {
            m.localName = n
            m.nameIsShortened = a.nameIsShortened
        }
        // Complete when a part that lists services says its list is complete (an
        // incomplete list in the advertisement stays incomplete unless the scan
        // response completes it).
        let listing = [a, m].filter { !$0.serviceUUIDs.isEmpty }
        m.serviceUUIDsComplete = listing.isEmpty || listing.contains { $0.serviceUUIDsComplete }
        m.serviceUUIDs = a.serviceUUIDs + m.serviceUUIDs.filter { !a.serviceUUIDs.contains($0) }
        m.txPowerLevel = a.txPowerLevel ?? m.txPowerLevel
        m.appearance = a.appearance ?? m.appearance
        m.serviceData = a.serviceData + m.serviceData
        m.manufacturerData = a.manufacturerData + m.manufacturerData
        m.connectionIntervalRange = a.connectionIntervalRange ?? m.connectionIntervalRange
        m.uri = a.uri ?? m.uri
        m.leRole = a.leRole ?? m.leRole
        m.advertisingInterval = a.advertisingInterval ?? m.advertisingInterval
        m.other = a.other + m.other
        m.damage = a.damage ?? m.damage
        return m
    }

    public var name: String? { merged.localName }

    /// Distance from the smoothed RSSI and the merged data's calibration, if any.
    public var estimatedMetres: Double? {
        guard let r = smoothedRSSI else { return nil }
        let m = merged
        if let b = m.iBeacon { return DistanceEstimate.metres(rssi: r, rssiAtOneMetre: Double(b.measuredPower)) }
        if let tx = m.txPowerLevel { return DistanceEstimate.metres(rssi: r, txPowerLevel: tx) }
        return nil
    }
}

public struct DeviceRegistry: Sendable {
    public private(set) var devices: [BluetoothAddress: KnownDevice] = [:]
    /// Devices kept at most; the least recently seen unconnected one is forgotten first.
    public var capacity: Int

    public init(capacity: Int = 1024) { self.capacity = Swift.max(1, capacity) }

    /// Records one advertisement or scan response seen at `time`; returns the device as
    /// it now stands. With `identity` (the bonded identity its private address resolved
    /// to) the device is kept under the identity, whatever address it used.
    @discardableResult
    public mutating func record(_ a: Advertisement, at time: Duration,
                                identity: (address: BluetoothAddress, type: AddressType)? = nil) -> KnownDevice {
        let key = identity?.address ?? a.address
        var d = devices[key] ?? KnownDevice(address: a.address, addressType: a.addressType, firstSeen: time, lastSeen: time)
        d.address = a.address
        if let identity {
            d.identity = identity.address
            d.identityType = identity.type
        }
        if a.isScanResponse { d.scanResponse = a.data } else {
            d.advertisement = a.data
            d.isConnectable = a.isConnectable
        }
        d.addressType = a.addressType
        // 127: the controller could not measure it (§7.7.65.2); keep what we had.
        if a.rssi != 127 {
            d.lastRSSI = a.rssi
            d.filter.add(a.rssi)
        }
        d.lastSeen = time
        d.reports += 1
        devices[key] = d
        evictIfNeeded()
        return d
    }

    public mutating func connected(_ address: BluetoothAddress, type: AddressType, handle: UInt16, at time: Duration) {
        // A device kept under its identity is found by the address it connected with.
        let key = devices[address] != nil ? address : devices.first { $0.value.address == address }?.key ?? address
        var d = devices[key] ?? KnownDevice(address: address, addressType: type, firstSeen: time, lastSeen: time)
        d.connection = handle
        d.connectionCount += 1
        d.lastSeen = time
        devices[key] = d
        evictIfNeeded()
    }

    public mutating func disconnected(handle: UInt16) {
        guard let (a, _) = devices.first(where: { $0.value.connection == handle }) else { return }
        devices[a]?.connection = nil
    }

    /// The device with this identity or address (the one it was last seen with).
    public func device(_ address: BluetoothAddress) -> KnownDevice? {
        devices[address] ?? devices.values.first { $0.address == address }
    }

    /// Connected devices, by handle.
    public var connected: [KnownDevice] { devices.values.filter { $0.connection != nil }.sorted { ($0.connection ?? 0) < ($1.connection ?? 0) } }

    /// Every device, most recently seen first.
    public var all: [KnownDevice] { devices.values.sorted { $0.lastSeen > $1.lastSeen } }

    /// Devices whose merged data matches `filter` (name and services from either PDU).
    public func matching(_ filter: ScanFilter) -> [KnownDevice] {
        all.filter { d in
            filter.matches(Advertisement(address: d.address, addressType: d.addressType, rssi: d.lastRSSI ?? -127,
                                         eventType: d.isConnectable ? 0 : 3, data: d.merged, raw: []))
        }
    }

    private mutating func evictIfNeeded() {
        while devices.count > capacity {
            guard let oldest = devices.values.filter({ $0.connection == nil }).min(by: { $0.lastSeen < $1.lastSeen }) else { return }
            devices[oldest.identity ?? oldest.address] = nil
        }
    }
}
