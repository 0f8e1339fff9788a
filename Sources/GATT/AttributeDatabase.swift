// The GATT server's attribute database (Core Specification v5.4, Vol 3, Part G,
// §3): services (primary, secondary, with includes), characteristic declarations,
// values and descriptors laid out as attributes with handles, and the declaration
// values §3.1–§3.3 define. Services can be added and removed at any time; handles of
// the others do not move.

import HCI

/// What a client must have to read or write an attribute (Vol 3, Part F, §3.2.5).
public struct AttributePermissions: OptionSet, Hashable, Sendable {
    public let rawValue: UInt16
    public init(rawValue: UInt16) { self.rawValue = rawValue }
    public static let read = AttributePermissions(rawValue: 1 << 0)
    public static let write = AttributePermissions(rawValue: 1 << 1)
    public static let readEncrypted = AttributePermissions(rawValue: 1 << 2)
    public static let writeEncrypted = AttributePermissions(rawValue: 1 << 3)
    public static let readAuthenticated = AttributePermissions(rawValue: 1 << 4)
    public static let writeAuthenticated = AttributePermissions(rawValue: 1 << 5)
    public static let readAuthorized = AttributePermissions(rawValue: 1 << 6)
    public static let writeAuthorized = AttributePermissions(rawValue: 1 << 7)
    public static let readWrite: AttributePermissions = [.read, .write]
}

public struct GATTDescriptor: Hashable, Sendable {
    public var uuid: BluetoothUUID
    public var permissions: AttributePermissions
    public var value: [UInt8]
    /// Longest value a write may set.
    public var maximumLength: Int
    public init(uuid: BluetoothUUID, permissions: AttributePermissions = .read, value: [UInt8] = [], maximumLength: Int = 512) {
        self.uuid = uuid
        self.permissions = permissions
        self.value = value
        self.maximumLength = maximumLength
    }

    public static func userDescription(_ text: String) -> GATTDescriptor {
        GATTDescriptor(uuid: GATTType.userDescription, value: Array(text.utf8))
    }
}

public struct GATTCharacteristic: Hashable, Sendable {
    public var uuid: BluetoothUUID
    public var properties: CharacteristicProperties
    public var permissions: AttributePermissions
    public var value: [UInt8]
    public var maximumLength: Int
    /// Descriptors besides the Client Characteristic Configuration, which is added
    /// automatically when the properties include notify or indicate.
    public var descriptors: [GATTDescriptor]
    public init(uuid: BluetoothUUID, properties: CharacteristicProperties, permissions: AttributePermissions? = nil,
                value: [UInt8] = [], maximumLength: Int = 512, descriptors: [GATTDescriptor] = []) {
        self.uuid = uuid
        self.properties = properties
        var p: AttributePermissions = []
        if properties.contains(.read) { p.insert(.read) }
        if !properties.isDisjoint(with: [.write, .writeWithoutResponse, .authenticatedSignedWrites]) { p.insert(.write) }
        self.permissions = permissions ?? p
        self.value = value
        self.maximumLength = maximumLength
        self.descriptors = descriptors
    }
}

public struct GATTService: Hashable, Sendable {
    public var uuid: BluetoothUUID
    public var isPrimary: Bool
    /// Start handles of services already in the database that this one includes.
    public var includes: [UInt16]
    public var characteristics: [GATTCharacteristic]
    public init(uuid: BluetoothUUID, isPrimary: Bool = true, includes: [UInt16] = [], characteristics: [GATTCharacteristic] = []) {
        self.uuid = uuid
        self.isPrimary = isPrimary
        self.includes = includes
        self.characteristics = characteristics
    }
}

/// One attribute as the server holds it.
public struct Attribute: Hashable, Sendable {
    public enum Role: Hashable, Sendable {
        case serviceDeclaration(end: UInt16)
        case include
        case characteristicDeclaration(valueHandle: UInt16)
        case characteristicValue(properties: CharacteristicProperties)
        /// The Client Characteristic Configuration of the characteristic whose value is `valueHandle`.
        case clientConfiguration(valueHandle: UInt16, properties: CharacteristicProperties)
        case descriptor
    }
    public var handle: UInt16
    public var type: BluetoothUUID
    public var value: [UInt8]
    public var permissions: AttributePermissions
    public var maximumLength: Int
    public var role: Role
}

/// Handles given to an added service.
public struct ServiceHandles: Hashable, Sendable {
    public var start: UInt16
    public var end: UInt16
    /// Value handle of each characteristic, in the order given.
    public var characteristicValues: [UInt16]
    /// Client Characteristic Configuration handle of each characteristic (nil without notify/indicate).
    public var clientConfigurations: [UInt16?]
    public init(start: UInt16, end: UInt16, characteristicValues: [UInt16], clientConfigurations: [UInt16?]) {
        self.start = start
        self.end = end
        self.characteristicValues = characteristicValues
        self.clientConfigurations = clientConfigurations
    }
}

public enum AttributeDatabaseError: Error, Hashable, Sendable {
    case outOfHandles
    case unknownIncludedService(UInt16)
    case noServiceAt(UInt16)
}

public struct AttributeDatabase: Sendable {
    public private(set) var attributes: [Attribute] = []

    public init() {}

    /// Adds a service after the highest handle in use and returns its handles.
    @discardableResult
    public mutating func add(_ service: GATTService) throws -> ServiceHandles {
        var next = Int(attributes.last?.handle ?? 0) + 1
        var new: [Attribute] = []
        func take() throws -> UInt16 {
            guard next <= 0xFFFF else { throw AttributeDatabaseError.outOfHandles }
            defer { next += 1 }
            return UInt16(next)
        }
        let start = try take()
        new.append(Attribute(handle: start, type: service.isPrimary ? GATTType.primaryService : GATTType.secondaryService,
                             value: service.uuid.attBytes, permissions: .read, maximumLength: 16, role: .serviceDeclaration(end: 0)))
        for inc in service.includes {
            guard let s = attributes.first(where: { $0.handle == inc }), case let .serviceDeclaration(end) = s.role else {
                throw AttributeDatabaseError.unknownIncludedService(inc)
            }
            // §3.2: start, end, and the UUID only when it is 16-bit.
            var v = [UInt8(inc & 0xFF), UInt8(inc >> 8), UInt8(end & 0xFF), UInt8(end >> 8)]
            if s.value.count == 2 { v += s.value }
            new.append(Attribute(handle: try take(), type: GATTType.include, value: v, permissions: .read, maximumLength: 6, role: .include))
        }
        var values: [UInt16] = [], cccds: [UInt16?] = []
        for c in service.characteristics {
            let decl = try take()
            let valueHandle = try take()
            let declValue = [c.properties.rawValue, UInt8(valueHandle & 0xFF), UInt8(valueHandle >> 8)] + c.uuid.attBytes
            new.append(Attribute(handle: decl, type: GATTType.characteristic, value: declValue, permissions: .read,
                                 maximumLength: declValue.count, role: .characteristicDeclaration(valueHandle: valueHandle)))
            new.append(Attribute(handle: valueHandle, type: c.uuid, value: c.value, permissions: c.permissions,
                                 maximumLength: c.maximumLength, role: .characteristicValue(properties: c.properties)))
            values.append(valueHandle)
            var cccd: UInt16?
            if !c.properties.isDisjoint(with: [.notify, .indicate]) {
                let h = try take()
                cccd = h
                new.append(Attribute(handle: h, type: GATTType.clientCharacteristicConfiguration, value: [0, 0],
                                     permissions: .readWrite, maximumLength: 2,
                                     role: .clientConfiguration(valueHandle: valueHandle, properties: c.properties)))
            }
            cccds.append(cccd)
            for d in c.descriptors {
                new.append(Attribute(handle: try take(), type: d.uuid, value: d.value, permissions: d.permissions,
                                     maximumLength: d.maximumLength, role: .descriptor))
            }
        }
        let end = new.last?.handle ?? start
        new[0].role = .serviceDeclaration(end: end)
        attributes += new
        return ServiceHandles(start: start, end: end, characteristicValues: values, clientConfigurations: cccds)
    }

    /// Removes the service declared at `start` with all its attributes; returns its handle range.
    @discardableResult
    public mutating func removeService(at start: UInt16) throws -> ClosedRange<UInt16> {
        guard let s = attributes.first(where: { $0.handle == start }), case let .serviceDeclaration(end) = s.role else {
            throw AttributeDatabaseError.noServiceAt(start)
        }
        attributes.removeAll { (start...end).contains($0.handle) }
        return start...end
    }

    public func attribute(_ handle: UInt16) -> Attribute? {
        guard let i = index(of: handle) else { return nil }
        return attributes[i]
    }

    func index(of handle: UInt16) -> Int? {
        var lo = 0, hi = attributes.count - 1
        while lo <= hi {
            let mid = (lo + hi) / 2
            if attributes[mid].handle == handle { return mid }
            if attributes[mid].handle < handle { lo = mid + 1 } else { hi = mid - 1 }
        }
        return nil
    }

    /// The handle of the Client Characteristic Configuration of the characteristic
    /// whose value is at `valueHandle`: among the descriptors after the value, up to
    /// the next characteristic or service (a look-up by handle, not a walk of the
    /// whole database); nil when it has none.
    public func clientConfigurationHandle(of valueHandle: UInt16) -> UInt16? {
        guard let i = index(of: valueHandle) else { return nil }
        for a in attributes[(i + 1)...] {
            switch a.role {
            case let .clientConfiguration(v, _) where v == valueHandle: return a.handle
            case .serviceDeclaration, .characteristicDeclaration: return nil
            default: continue
            }
        }
        return nil
    }

    /// Attributes with start ≤ handle ≤ end, in handle order.
    public func attributes(in range: ClosedRange<UInt16>) -> ArraySlice<Attribute> {
        let lo = attributes.firstIndex { $0.handle >= range.lowerBound } ?? attributes.count
        let hi = attributes.lastIndex { $0.handle <= range.upperBound } ?? -1
        return lo <= hi ? attributes[lo...hi] : []
    }

    /// Sets a value (the server side writing its own characteristic); false if no such handle.
    @discardableResult
    public mutating func setValue(_ value: [UInt8], at handle: UInt16) -> Bool {
        guard let i = index(of: handle) else { return false }
        attributes[i].value = value
        return true
    }
}
