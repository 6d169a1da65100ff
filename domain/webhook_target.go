package domain

import "net/netip"

// Kinds of address a webhook target must not reach unless WEBHOOK_ALLOW_LOCAL is set, as
// RefusedAddressKind names them.
const (
	AddressLoopback      = "loopback"
	AddressLinkLocal     = "link-local"
	AddressUnspecified   = "unspecified"
	AddressCloudMetadata = "cloud metadata"
	AddressCarrierNAT    = "carrier-grade NAT"
)

// cloudMetadata are the instance metadata endpoints of cloud providers that are not
// link-local: a webhook delivered there would hand the service's own credentials to whoever
// registered it. The link-local ones (169.254.169.254 on AWS, GCP, Azure, Oracle,
// DigitalOcean, OpenStack; 169.254.170.2 and 169.254.170.23 for AWS ECS and EKS) are refused
// as link-local, and Alibaba's 100.100.100.200 as carrier-grade NAT.
var cloudMetadata = map[netip.Addr]bool{
	netip.MustParseAddr("fd00:ec2::254"):      true, // AWS IMDS over IPv6
	netip.MustParseAddr("fd00:ec2::23"):       true, // AWS EKS Pod Identity over IPv6
	netip.MustParseAddr("fd20:ce::254"):       true, // GCP metadata server over IPv6
	netip.MustParseAddr("fd00:c1::a9fe:a9fe"): true, // Oracle Cloud IMDS over IPv6
	netip.MustParseAddr("168.63.129.16"):      true, // Azure WireServer (host agent)
	netip.MustParseAddr("192.0.0.192"):        true, // Oracle Cloud classic metadata
	netip.MustParseAddr("100.100.100.200"):    true, // Alibaba Cloud metadata
}

var (
	// carrierNAT is RFC 6598's shared address space: provider-internal, never a public
	// receiver, and home to Alibaba's metadata endpoint.
	carrierNAT = netip.MustParsePrefix("100.64.0.0/10")
	// nat64 is RFC 6052's well-known prefix: 64:ff9b::a9fe:a9fe reaches 169.254.169.254
	// through a NAT64 gateway, so the IPv4 address inside it is what is judged.
	nat64 = netip.MustParsePrefix("64:ff9b::/96")
)

// RefusedAddressKind names why a webhook must not connect to addr (one of the Address
// kinds), or answers "" for an address it may reach. IPv4-mapped and NAT64 addresses are
// judged as the IPv4 address they carry. Registration (a literal address in the URL) and
// delivery (the address actually dialed, after name resolution) both ask here, so they
// cannot disagree.
func RefusedAddressKind(addr netip.Addr) string {
	addr = addr.Unmap().WithZone("")
	if nat64.Contains(addr) {
		b := addr.As16()
		addr = netip.AddrFrom4([4]byte(b[12:16]))
	}
	switch {
	case addr.IsLoopback():
		return AddressLoopback
	case addr.IsLinkLocalUnicast(), addr.IsLinkLocalMulticast():
		return AddressLinkLocal
	case addr.IsUnspecified():
		return AddressUnspecified
	case cloudMetadata[addr]:
		return AddressCloudMetadata
	case carrierNAT.Contains(addr):
		return AddressCarrierNAT
	}
	return ""
}
